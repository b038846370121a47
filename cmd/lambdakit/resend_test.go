package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// outboxMessage is one message a record's completion carries.
type outboxMessage struct{ queue, name, body string }

// completion is the stream record of a record's completion (an INSERT of
// a completed record) carrying msgs, as a dynamostore.Store writes it
// with the default attribute names but status, which is statusAttr.
func completion(eventID, recordID, statusAttr string, msgs ...outboxMessage) events.DynamoDBEventRecord {
	var list []events.DynamoDBAttributeValue
	for _, m := range msgs {
		el := map[string]events.DynamoDBAttributeValue{
			"queueUrl": events.NewStringAttribute(m.queue), "name": events.NewStringAttribute(m.name), "body": events.NewStringAttribute(m.body),
		}
		if strings.HasSuffix(m.queue, ".fifo") {
			el["groupId"] = events.NewStringAttribute("cus_1")
		}
		list = append(list, events.NewMapAttribute(el))
	}
	rec := events.DynamoDBEventRecord{EventID: eventID, EventName: string(events.DynamoDBOperationTypeInsert)}
	rec.Change.SequenceNumber = "1" + eventID
	rec.Change.NewImage = map[string]events.DynamoDBAttributeValue{
		"id": events.NewStringAttribute(recordID), statusAttr: events.NewStringAttribute("COMPLETED"),
		"lease": events.NewStringAttribute("lease-" + recordID), "messages": events.NewListAttribute(list),
	}
	return rec
}

// deadLetter runs the relay, reading records named as names says, on recs, each of which must have a message that
// can never be sent (its queue missing), so that it dead-letters each of
// them in dlq: real dead letters, as the relay writes them.
func deadLetter(t *testing.T, client *sqs.Client, dlq string, names dynamostore.Options, recs ...events.DynamoDBEventRecord) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := outbox.Relay(client, func(o *outbox.RelayOptions) {
		o.DeadLetterQueueURL, o.Record = dlq, names
	})(ctx, events.DynamoDBEvent{Records: recs})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("relay: %v, failures %v; want every record dead-lettered", err, resp.BatchItemFailures)
	}
}

// missingQueue is the name and URL of a queue that does not exist yet,
// next to the queue at q (on its endpoint, its name and suffix, FIFO as q
// is); createQueue creates it.
func missingQueue(q, suffix string) (name, url string) {
	name = strings.TrimSuffix(q[strings.LastIndex(q, "/")+1:], ".fifo")
	name = name[max(0, len(name)-60):] + "-" + suffix // its end, random, is its own; SQS takes 80 characters
	if strings.HasSuffix(q, ".fifo") {
		name += ".fifo"
	}
	return name, q[:strings.LastIndex(q, "/")+1] + name
}

func createQueue(t *testing.T, client *sqs.Client, name string) {
	t.Helper()
	in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
	if strings.HasSuffix(name, ".fifo") {
		in.Attributes = map[string]string{"FifoQueue": "true"}
	}
	if _, err := client.CreateQueue(t.Context(), in); err != nil {
		t.Fatal(err)
	}
}

// withID counts the messages of msgs that carry the ID the relay gives the
// message name of record recordID to queue, in IDAttribute and, on a FIFO
// queue, as their deduplication ID.
func withID(msgs []types.Message, recordID, queue, name string) int {
	id := outbox.RecordMessageID(recordID, "lease-"+recordID, queue, name)
	n := 0
	for _, m := range msgs {
		fifoOK := !strings.HasSuffix(queue, ".fifo") || m.Attributes["MessageDeduplicationId"] == outbox.DedupID(id)
		if aws.ToString(m.MessageAttributes[outbox.IDAttribute].StringValue) == id && fifoOK {
			n++
		}
	}
	return n
}

func TestResend(t *testing.T) {
	t.Parallel() // its own queues: it waits mostly
	srv := moto.Server(t)
	client := sqs.NewFromConfig(moto.Config(t))
	env := redriveEnv(srv.URL)

	t.Run("a completion whose queue was missing: each message once, with the relay's IDs; a copy of the dead letter sends nothing more", func(t *testing.T) {
		dlq := newPublishQueue(t, client, false, nil)
		orders := newPublishQueue(t, client, true, nil)
		gone, receipts := missingQueue(orders.url, "gone")
		deadLetter(t, client, dlq.url, dynamostore.Options{}, completion("ev-1", "orders#1", "status",
			outboxMessage{orders.url, "charged", `{"n":1}`}, outboxMessage{receipts, "receipted", `{"n":2}`}, outboxMessage{orders.url, "notified", `{"n":3}`}))
		if n := orders.count(t); n != 1 {
			t.Fatalf("orders holds %d messages before the resend; want 1, the one sent before the failure", n)
		}
		body := dlq.drain(t)
		if len(body) != 1 {
			t.Fatalf("the DLQ holds %d dead letters; want 1", len(body))
		}
		dlq.sendAll(t, []dlqMessage{{body: aws.ToString(body[0].Body)}})
		createQueue(t, client, gone)

		// SQS drops a FIFO send whose deduplication ID it accepted in the
		// last 5 minutes, even once that message was received and deleted;
		// moto compares it only with the messages still in the queue. So
		// that moto answers as SQS would, the message the relay sent stays
		// in the queue, not received, until the end.
		r := cli(t, env, "", "resend", "-from", dlq.url)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if n := strings.Count(r.stdout, ": sent outbox#"); n != 3 || !strings.Contains(r.stdout, "(event ev-1): 3 messages\n") {
			t.Errorf("stdout says %d sends; want 3, and the dead letter resent:\n%s", n, r.stdout)
		}
		if !strings.HasSuffix(r.stderr, "lambdakit resend: received 1: resent 1 (3 messages sent), left 0, not deleted 0\n") {
			t.Errorf("stderr does not end with the summary:\n%s", r.stderr)
		}
		// The same dead letter again (the relay's retried batch, say).
		dlq.sendAll(t, []dlqMessage{{body: aws.ToString(body[0].Body)}})
		if r := cli(t, env, "", "resend", "-from", dlq.url); r.code != 0 {
			t.Fatalf("second run: exit status %d; want 0\n%s", r.code, r.stderr)
		}
		got := map[string][]types.Message{orders.url: orders.drain(t), receipts: testenv.Drain(t, client, receipts)}
		for _, m := range []outboxMessage{{orders.url, "charged", ""}, {receipts, "receipted", ""}, {orders.url, "notified", ""}} {
			if n := withID(got[m.queue], "orders#1", m.queue, m.name); n != 1 {
				t.Errorf("%s: %d messages with the relay's ID and deduplication ID; want 1", m.name, n)
			}
		}
		if n := len(got[orders.url]) + len(got[receipts]); n != 3 {
			t.Errorf("the queues hold %d messages; want 3, one of each", n)
		}
		if n := dlq.count(t); n != 0 {
			t.Errorf("the DLQ holds %d dead letters; want none", n)
		}
	})

	t.Run("a dead letter whose queue is still missing and a message that is none are left and told: the others resent, exit 1", func(t *testing.T) {
		dlq := newPublishQueue(t, client, false, nil)
		_, goneURL := missingQueue(dlq.url, "gone")
		mended, mendedURL := missingQueue(dlq.url, "mended")
		deadLetter(t, client, dlq.url, dynamostore.Options{},
			completion("ev-gone", "orders#2", "status", outboxMessage{goneURL, "charged", "{}"}),
			completion("ev-mended", "orders#3", "status", outboxMessage{mendedURL, "charged", "{}"}))
		dlq.sendAll(t, []dlqMessage{{body: "not JSON"}})
		createQueue(t, client, mended)

		r := cli(t, env, "", "resend", "-from", dlq.url)
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		for _, want := range []string{"(event ev-gone), after 0 messages of its 1 sent:", "not a dead letter of the outbox relay",
			"lambdakit resend: received 3: resent 1 (1 message sent), left 2, not deleted 0\n"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
			}
		}
		if n := withID(testenv.Drain(t, client, mendedURL), "orders#3", mendedURL, "charged"); n != 1 {
			t.Errorf("the mended queue holds %d messages with the relay's ID; want 1", n)
		}
		// Visible again at once, not after the command's visibility
		// timeout.
		if n := dlq.count(t); n != 2 {
			t.Errorf("the DLQ shows %d visible messages; want the 2 left", n)
		}
	})

	t.Run("a FIFO DLQ: a dead letter left holds back the rest of its group, and the run says how many wait", func(t *testing.T) {
		dlq := newPublishQueue(t, client, true, nil)
		_, goneURL := missingQueue(dlq.url, "gone")
		mended, mendedURL := missingQueue(dlq.url, "mended")
		recs := []events.DynamoDBEventRecord{completion("ev-gone", "orders#10", "status", outboxMessage{goneURL, "charged", "{}"})}
		for i := range 12 {
			recs = append(recs, completion(fmt.Sprintf("ev-%d", i), fmt.Sprintf("orders#%d", 11+i), "status", outboxMessage{mendedURL, "charged", "{}"}))
		}
		// Thirteen dead letters in the relay's one group, the one whose
		// queue stays missing first; then the others' queue is mended.
		deadLetter(t, client, dlq.url, dynamostore.Options{}, recs...)
		createQueue(t, client, mended)
		// -dry-run leaves every dead letter: it lists the first batch.
		dry := cli(t, env, "", "resend", "-dry-run", "-from", dlq.url)
		if dry.code != 0 || !strings.Contains(dry.stderr, "dry run: received 10:") || !strings.Contains(dry.stderr, "about 3 messages more wait in the DLQ, not received") {
			t.Errorf("-dry-run: exit status %d; want 0, 10 listed and 3 told as waiting\n%s", dry.code, dry.stderr)
		}
		r := cli(t, env, "", "resend", "-from", dlq.url)
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		for _, want := range []string{"received 10: resent 9 (9 messages sent), left 1", "about 3 messages more wait in the DLQ, not received"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("-dry-run says what each would send, without bodies, and sends and deletes nothing", func(t *testing.T) {
		dlq := newPublishQueue(t, client, false, nil)
		name, queue := missingQueue(dlq.url, "later")
		deadLetter(t, client, dlq.url, dynamostore.Options{}, completion("ev-dry", "orders#4", "status", outboxMessage{queue, "charged", `{"card":"4242"}`}))
		createQueue(t, client, name)

		r := cli(t, env, "", "resend", "-dry-run", "-from", dlq.url)
		id := outbox.RecordMessageID("orders#4", "lease-orders#4", queue, "charged")
		if r.code != 0 || !strings.Contains(r.stdout, ": would send "+id+" to "+queue+" (15 bytes)\n") || strings.Contains(r.stdout, "4242") {
			t.Fatalf("exit status %d, stdout:\n%s\nwant 0, and the message's ID, queue and size, not its body\n%s", r.code, r.stdout, r.stderr)
		}
		if n := len(testenv.Drain(t, client, queue)); n != 0 {
			t.Errorf("the queue holds %d messages; want none", n)
		}
		if n := dlq.count(t); n != 1 {
			t.Errorf("the DLQ shows %d visible dead letters; want 1", n)
		}
	})

	t.Run("-max bounds the dead letters taken; renamed attributes need their flag", func(t *testing.T) {
		dlq := newPublishQueue(t, client, false, nil)
		name, queue := missingQueue(dlq.url, "max")
		deadLetter(t, client, dlq.url, dynamostore.Options{StatusAttr: "record_status"},
			completion("ev-a", "orders#5", "record_status", outboxMessage{queue, "charged", "{}"}),
			completion("ev-b", "orders#6", "record_status", outboxMessage{queue, "charged", "{}"}),
			completion("ev-c", "orders#7", "record_status", outboxMessage{queue, "charged", "{}"}))
		createQueue(t, client, name)

		// Without -status-attr the image reads as no record: left.
		if r := cli(t, env, "", "resend", "-max", "1", "-from", dlq.url); r.code != 1 || !strings.Contains(r.stderr, "not an outbox item") {
			t.Errorf("without -status-attr: exit status %d; want 1 and the dead letter left\n%s", r.code, r.stderr)
		}
		r := cli(t, env, "", "resend", "-max", "2", "-status-attr", "record_status", "-from", dlq.url)
		if r.code != 0 || !strings.HasSuffix(r.stderr, "received 2: resent 2 (2 messages sent), left 0, not deleted 0\n") {
			t.Fatalf("exit status %d; want 0 and 2 resent\n%s", r.code, r.stderr)
		}
		if n := dlq.count(t); n != 1 {
			t.Errorf("the DLQ shows %d dead letters; want 1, past -max", n)
		}
		if n := len(testenv.Drain(t, client, queue)); n != 2 {
			t.Errorf("the queue holds %d messages; want 2", n)
		}
	})

	t.Run("a record's dead letter read without the -*-attr flags its function needs is left: nothing sent, nothing sent under other IDs", func(t *testing.T) {
		dlq := newPublishQueue(t, client, false, nil)
		name, queue := missingQueue(dlq.url, "attrs")
		// Two functions that renamed an attribute: without its flag the
		// messages would be read as none (the dead letter deleted with
		// nothing sent), or the record's ID as "" (each message sent under
		// another ID than the relay's, so a copy of one it sent before the
		// failure).
		msgs := completion("ev-msgs", "orders#8", "status", outboxMessage{queue, "charged", "{}"})
		msgs.Change.NewImage["msgs"] = msgs.Change.NewImage["messages"]
		delete(msgs.Change.NewImage, "messages")
		key := completion("ev-key", "orders#9", "status", outboxMessage{queue, "charged", "{}"})
		key.Change.NewImage["pk"] = key.Change.NewImage["id"]
		delete(key.Change.NewImage, "id")
		deadLetter(t, client, dlq.url, dynamostore.Options{MessagesAttr: "msgs"}, msgs)
		deadLetter(t, client, dlq.url, dynamostore.Options{KeyAttr: "pk"}, key)
		createQueue(t, client, name)

		r := cli(t, env, "", "resend", "-from", dlq.url)
		if r.code != 1 || !strings.HasSuffix(r.stderr, "received 2: resent 0 (0 messages sent), left 2, not deleted 0\n") ||
			strings.Count(r.stderr, "give the -*-attr flags their names") != 2 {
			t.Errorf("exit status %d; want 1 and both dead letters left, each told to give the flags\n%s", r.code, r.stderr)
		}
		if n := len(testenv.Drain(t, client, queue)); n != 0 {
			t.Errorf("the queue holds %d messages; want none", n)
		}
		if n := dlq.count(t); n != 2 {
			t.Errorf("the DLQ shows %d dead letters; want the 2 left", n)
		}
	})
}
