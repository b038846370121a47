package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A poison outbox item (its queue does not exist) between good ones: with a
// dead-letter queue the relay sends it there with why, and every good item
// still goes out, in one invocation that reports no failure. Without one,
// the poison item fails the batch and the shard stops at it.
func TestPoisonItemGoesToTheDeadLetterQueueAndHoldsUpNothing(t *testing.T) {
	var missing string
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		queue := f.queue
		if p.ID == "pay_poison" {
			queue = missing
		}
		return ob.Publish(ctx, outbox.Message{QueueURL: queue, Name: "payment.charged", Body: `{"payment_id":"` + p.ID + `"}`, GroupID: p.Customer})
	}})
	// A queue URL of this endpoint whose queue does not exist.
	missing = f.queue[:strings.LastIndex(f.queue, "/")+1] + "gone-" + testenv.Name(t) + ".fifo"
	dlq := testenv.Queue(t, f.sqs, false, nil)
	// One at a time, so that the stream holds them in this order.
	f.deliver(pay("pay_a", "cus_A", 1))
	f.deliver(pay("pay_poison", "cus_B", 2))
	f.deliver(pay("pay_c", "cus_C", 3))
	ev := f.stream()
	if inserts(ev) != 3 {
		t.Fatalf("stream holds %d inserts; want 3", inserts(ev))
	}
	// The poison item must sit between the good ones for the test to mean
	// anything: the relay goes in order and stops at a failure.
	if body := ev.Records[1].Change.NewImage["body"].String(); !strings.Contains(body, "pay_poison") {
		t.Fatalf("second stream record carries %s; want pay_poison's", body)
	}

	without := relayOnce(t, f, ev, "")
	if len(without.BatchItemFailures) != 1 || without.BatchItemFailures[0].ItemIdentifier != ev.Records[1].Change.SequenceNumber {
		t.Fatalf("without a dead-letter queue: failures %v; want the poison item's sequence number %s", without.BatchItemFailures, ev.Records[1].Change.SequenceNumber)
	}
	// pay_a went out before the stop and stays in the queue: the relay
	// sends it again below with the same deduplication ID, which SQS
	// drops within 5 minutes even once the first was received and
	// deleted; moto drops it only while the first is still in the queue.
	// (The test drained it here once, and then wanted it sent again,
	// which SQS would not do, and moto did not always do either: a
	// fresh-clone CI saw only pay_c.)

	with := relayOnce(t, f, ev, dlq)
	if len(with.BatchItemFailures) != 0 {
		t.Fatalf("with a dead-letter queue: failures %v; want none", with.BatchItemFailures)
	}
	var got []string
	for _, m := range f.downstream() {
		got = append(got, aws.ToString(m.Body))
	}
	if len(got) != 2 || !strings.Contains(got[0]+got[1], "pay_a") || !strings.Contains(got[0]+got[1], "pay_c") {
		t.Errorf("downstream holds %q; want pay_a's and pay_c's", got)
	}
	dl := oneDeadLetter(t, f.sqs, dlq)
	if dl.SequenceNumber != ev.Records[1].Change.SequenceNumber || dl.EventID != ev.Records[1].EventID ||
		dl.NewImage["queueUrl"].String() != missing || !strings.Contains(dl.Error, "gone-") {
		t.Errorf("dead letter %+v; want the poison record, its image and why", dl)
	}
}

// A send that fails for a reason retries can mend is not dead-lettered,
// and a dead letter that cannot be sent fails the record: nothing is
// dropped on the relay's word alone.
func TestRelayDeadLettersOnlyWhatCanNeverBeSent(t *testing.T) {
	f := newFixture(t)
	f.deliver(pay("pay_x", "cus_X", 1))
	ev := f.stream()
	bad := ev
	bad.Records = []events.DynamoDBEventRecord{ev.Records[0]}
	img := map[string]events.DynamoDBAttributeValue{}
	for k, v := range ev.Records[0].Change.NewImage {
		img[k] = v
	}
	delete(img, "body") // not an outbox item: outbox.ErrBadItem
	bad.Records[0].Change.NewImage = img
	gone := f.queue[:strings.LastIndex(f.queue, "/")+1] + "no-dlq-" + testenv.Name(t)
	if resp := relayOnce(t, f, bad, gone); len(resp.BatchItemFailures) != 1 {
		t.Errorf("a bad item whose dead letter cannot be sent: failures %v; want the record failed", resp.BatchItemFailures)
	}
}

// oneDeadLetter drains dlq, which must hold one dead letter, and returns it.
func oneDeadLetter(t *testing.T, client *sqs.Client, dlq string) outbox.DeadLetter {
	t.Helper()
	dead := testenv.Drain(t, client, dlq)
	if len(dead) != 1 {
		t.Fatalf("dead-letter queue holds %d messages; want 1", len(dead))
	}
	var dl outbox.DeadLetter
	if err := json.Unmarshal([]byte(aws.ToString(dead[0].Body)), &dl); err != nil {
		t.Fatal(err)
	}
	return dl
}

func relayOnce(t *testing.T, f *fixture, ev events.DynamoDBEvent, dlq string) events.DynamoDBEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
		o.Stream.Logger = lambdakittest.Logger(t)
		o.DeadLetterQueueURL = dlq
	})(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A dead letter's image, mended, is sent once the item is written again:
// not over the item still in the table (a MODIFY, which the relay skips,
// as it skips the rewrites of a retried completion), but after deleting it
// (a REMOVE, skipped too), as a new item (an INSERT).
func TestDeadLetterIsSentWhenDeletedThenWrittenAgain(t *testing.T) {
	var missing string
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		return ob.Publish(ctx, outbox.Message{QueueURL: missing, Name: "payment.charged", Body: `{"payment_id":"` + p.ID + `"}`, GroupID: p.Customer})
	}})
	missing = f.queue[:strings.LastIndex(f.queue, "/")+1] + "gone-" + testenv.Name(t) + ".fifo"
	dlq := testenv.Queue(t, f.sqs, false, nil)
	f.deliver(pay("pay_poison", "cus_B", 2))
	ev := f.stream()
	if resp := relayOnce(t, f, ev, dlq); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v; want the poison item dead-lettered", resp.BatchItemFailures)
	}
	dl := oneDeadLetter(t, f.sqs, dlq)
	// Mended: the queue it names now is one that exists.
	item := itemOf(dl.NewImage)
	item["queueUrl"] = &types.AttributeValueMemberS{Value: f.queue}
	key := map[string]types.AttributeValue{"pk": item["pk"], "id": item["id"]}
	seen := len(ev.Records)
	// relayNew relays the stream records after the ones seen so far.
	relayNew := func(step string) {
		t.Helper()
		ev := f.stream()
		if len(ev.Records) == seen {
			t.Fatalf("%s: no new stream record", step)
		}
		ev.Records = ev.Records[seen:]
		seen += len(ev.Records)
		if resp := relayOnce(t, f, ev, dlq); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%s: failures %v", step, resp.BatchItemFailures)
		}
	}

	if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.outbox), Item: item}); err != nil {
		t.Fatal(err)
	}
	relayNew("written over the item")
	if got := f.downstream(); len(got) != 0 {
		t.Fatalf("written over the item (a MODIFY), the relay sent %d messages; want none, as the docs say", len(got))
	}

	if _, err := f.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(f.outbox), Key: key}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.outbox), Item: item}); err != nil {
		t.Fatal(err)
	}
	relayNew("deleted, then written")
	got := f.downstream()
	if len(got) != 1 || !strings.Contains(aws.ToString(got[0].Body), "pay_poison") {
		t.Errorf("deleted, then written: downstream holds %d messages; want pay_poison's, once", len(got))
	}
	if n := len(testenv.Drain(t, f.sqs, dlq)); n != 0 {
		t.Errorf("dead-letter queue holds %d more messages; want none", n)
	}
}

// itemOf is img, a stream image in DynamoDB's attribute-value JSON, as an
// item to write: the types an outbox item holds (strings, numbers, maps).
func itemOf(img map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		switch v.DataType() {
		case events.DataTypeString:
			item[k] = &types.AttributeValueMemberS{Value: v.String()}
		case events.DataTypeNumber:
			item[k] = &types.AttributeValueMemberN{Value: v.Number()}
		case events.DataTypeMap:
			item[k] = &types.AttributeValueMemberM{Value: itemOf(v.Map())}
		}
	}
	return item
}

// A completion of three messages whose second one's queue does not exist
// is dead-lettered whole, the first one sent and the third not. Once the
// queue exists, Resend of the dead letter, as docs/publishing.md says,
// sends each message once downstream: the first again with the ID and
// deduplication ID it had, which the FIFO queue drops, and writes nothing
// to the record's table.
//
// SQS drops a deduplication ID it accepted in the last 5 minutes, even once
// the message was received and deleted; moto 5.2.1 compares it only with
// the messages still in the queue. So that moto answers as SQS would, the
// first message stays in the queue (not received) until after Resend.
func TestResendOfARecordsDeadLetterSendsEachMessageOnce(t *testing.T) {
	var missing string
	names := []string{"payment.charged", "payment.receipted", "payment.notified"}
	f := newOnRecord(t, onRecordSetup{handle: func(ctx context.Context, f *onRecord, p payment) error {
		var msgs []outbox.Message
		for i, name := range names {
			queue := f.queue
			if i == 1 {
				queue = missing
			}
			msgs = append(msgs, outbox.Message{QueueURL: queue, GroupID: p.Customer, Name: name, Body: `{"type":"` + name + `","payment_id":"` + p.ID + `"}`})
		}
		return outbox.PublishOnRecord(ctx, msgs...)
	}})
	gone := "gone-" + testenv.Name(t) + ".fifo"
	missing = f.queue[:strings.LastIndex(f.queue, "/")+1] + gone
	dlq := testenv.Queue(t, f.sqs, false, nil)
	relayWith := func(ev events.DynamoDBEvent) events.DynamoDBEventResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
			o.Stream.Logger, o.DeadLetterQueueURL = lambdakittest.Logger(t), dlq
		})(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	queued := func(queueURL string) string {
		t.Helper()
		out, err := f.sqs.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)]
	}

	f.deliver(pay("pay_r", "cus_R", 700))
	ev := f.stream()
	if resp := relayWith(ev); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v; want the completion dead-lettered", resp.BatchItemFailures)
	}
	if n := queued(f.queue); n != "1" {
		t.Fatalf("downstream holds %s messages before the resend; want 1, the first, sent before the failure", n)
	}
	dl := oneDeadLetter(t, f.sqs, dlq)
	if dl.EventID != ev.Records[len(ev.Records)-1].EventID || !strings.Contains(dl.Error, gone) {
		t.Fatalf("dead letter %+v; want the completion and why", dl)
	}

	// The operator creates the queue, then resends the dead letter.
	out, err := f.sqs.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(gone), Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil || aws.ToString(out.QueueUrl) != missing {
		t.Fatalf("CreateQueue %s: %v, %v; want %s", gone, out, err, missing)
	}
	if err := outbox.Resend(t.Context(), f.sqs, dl); err != nil {
		t.Fatal(err)
	}

	item := f.item("pay_r")
	byQueue := map[string][]sqstypes.Message{f.queue: testenv.Drain(t, f.sqs, f.queue), missing: testenv.Drain(t, f.sqs, missing)}
	for i, name := range names {
		queue := f.queue
		if i == 1 {
			queue = missing
		}
		want := outbox.RecordMessageID(str(item, f.names.IDAttr()), str(item, "lease"), queue, name)
		n := 0
		for _, m := range byQueue[queue] {
			if aws.ToString(m.MessageAttributes[outbox.IDAttribute].StringValue) == want && m.Attributes["MessageDeduplicationId"] == outbox.DedupID(want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d messages with its ID and deduplication ID; want 1", name, n)
		}
	}
	if got := len(byQueue[f.queue]) + len(byQueue[missing]); got != len(names) {
		t.Errorf("downstream holds %d messages; want %d, one of each", got, len(names))
	}
	if after := f.stream(); len(after.Records) != len(ev.Records) {
		t.Errorf("the record table's stream grew from %d to %d records; want Resend to write nothing", len(ev.Records), len(after.Records))
	}
	if n := len(testenv.Drain(t, f.sqs, dlq)); n != 0 {
		t.Errorf("dead-letter queue holds %d more messages; want none", n)
	}
}

// A record's dead letter read under other attribute names than its
// store's (RelayOptions.Record not given for a store that renamed them)
// fails with ErrBadItem, nothing sent: its messages under another name
// read as none, and a nil would have the caller delete the dead letter
// with its messages never sent; its ID under another name reads as "",
// and the messages would go under IDs the relay never gave them, which no
// FIFO queue or consumer keyed on IDAttribute would take for copies. Given
// the names, the same dead letters send each message once.
func TestResendOfADeadLetterReadUnderOtherNamesSendsNothing(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	queue := testenv.Queue(t, client, false, nil)
	message := events.NewMapAttribute(map[string]events.DynamoDBAttributeValue{
		"queueUrl": events.NewStringAttribute(queue), "name": events.NewStringAttribute("payment.charged"),
		"body": events.NewStringAttribute(`{"payment_id":"pay_1"}`),
	})
	image := func(idAttr, messagesAttr string) map[string]events.DynamoDBAttributeValue {
		return map[string]events.DynamoDBAttributeValue{
			idAttr: events.NewStringAttribute("payment#pay_1"), "status": events.NewStringAttribute("COMPLETED"),
			"lease": events.NewStringAttribute("lease-1"), messagesAttr: events.NewListAttribute([]events.DynamoDBAttributeValue{message}),
		}
	}
	for _, c := range []struct {
		name  string
		img   map[string]events.DynamoDBAttributeValue
		names dynamostore.Options
	}{
		{"messages renamed", image("id", "msgs"), dynamostore.Options{MessagesAttr: "msgs"}},
		{"key renamed", image("pk", "messages"), dynamostore.Options{KeyAttr: "pk"}},
	} {
		dl := outbox.DeadLetter{EventID: "ev-" + c.name, SequenceNumber: "1", NewImage: c.img}
		if err := outbox.Resend(t.Context(), client, dl); !errors.Is(err, outbox.ErrBadItem) {
			t.Errorf("%s, without RelayOptions.Record: %v; want ErrBadItem", c.name, err)
		}
		if got := testenv.Drain(t, client, queue); len(got) != 0 {
			t.Errorf("%s, without RelayOptions.Record: %d messages sent; want none", c.name, len(got))
		}
		if err := outbox.Resend(t.Context(), client, dl, func(o *outbox.RelayOptions) { o.Record = c.names }); err != nil {
			t.Fatalf("%s, with the store's names: %v", c.name, err)
		}
		want := outbox.RecordMessageID("payment#pay_1", "lease-1", queue, "payment.charged")
		got := testenv.Drain(t, client, queue)
		if len(got) != 1 || aws.ToString(got[0].MessageAttributes[outbox.IDAttribute].StringValue) != want {
			t.Errorf("%s, with the store's names: %d messages sent; want 1, with ID %s", c.name, len(got), want)
		}
	}
}
