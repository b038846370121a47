package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// onRecord is a consumer whose records live on the business item of a
// payment (ReadableIDs, SetItem) in a table with a stream of new and old
// images, and whose handler publishes on the record; and the relay on
// that stream.
type onRecord struct {
	t         *testing.T
	db        *dynamodb.Client
	streams   *dynamodbstreams.Client
	sqs       *sqs.Client
	region    string
	table     string
	streamARN string
	queue     string
	fifo      bool
	batch     lambdakit.BatchFunc
	runs      atomic.Int32
	now       atomic.Int64 // the engine's clock, in Unix milliseconds
	// fail makes the handler fail after it published.
	fail atomic.Bool
	// names are the store's attributes.
	names dynamostore.Options
}

// onRecordSetup is what a test chooses: the handler (nil: charge, which
// sets the item and publishes payment.charged), the engine's options and
// the store's client.
type onRecordSetup struct {
	handle  func(ctx context.Context, f *onRecord, p payment) error
	opts    func(*lambdakit.Options)
	storeDB func(f *onRecord) *dynamodb.Client // nil: f.db
	// standard makes the queue a standard one, which keeps what a FIFO
	// queue's deduplication would drop.
	standard bool
	// view is the table's stream view ("": NEW_AND_OLD_IMAGES).
	view types.StreamViewType
	// record names the store's attributes (nil: the defaults).
	record func(*dynamostore.Options)
	// queueAttrs are the queue's attributes besides its type.
	queueAttrs map[string]string
}

// charge is the handler of the tests: the payment as the record's item,
// and its event on the record.
func charge(ctx context.Context, f *onRecord, p payment) error {
	if err := dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: fmt.Sprint(p.Amount)}}); err != nil {
		return err
	}
	group := p.Customer
	if !f.fifo {
		group = ""
	}
	return outbox.PublishOnRecord(ctx, outbox.Message{
		QueueURL: f.queue, GroupID: group, Name: "payment.charged",
		Body:       fmt.Sprintf(`{"type":"payment.charged","payment_id":%q}`, p.ID),
		Attributes: map[string]string{"type": "payment.charged"},
	})
}

func newOnRecord(t *testing.T, s onRecordSetup) *onRecord {
	cfg := moto.Config(t)
	f := &onRecord{t: t, db: dynamodb.NewFromConfig(cfg), streams: dynamodbstreams.NewFromConfig(cfg), sqs: sqs.NewFromConfig(cfg), region: cfg.Region}
	f.now.Store(time.Now().UnixMilli())
	f.table = testenv.Name(t) + "-payments"
	view := s.view
	if view == "" {
		view = types.StreamViewTypeNewAndOldImages
	}
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(f.table),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: view},
	}
	var err error
	f.names, err = dynamostore.ResolveOptions(s.record)
	if err != nil {
		t.Fatal(err)
	}
	if f.names.SortKeyAttr != "" {
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(f.names.SortKeyAttr), KeyType: types.KeyTypeRange})
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(f.names.SortKeyAttr), AttributeType: types.ScalarAttributeTypeS})
	}
	f.streamARN = aws.ToString(testenv.CreateTable(t, f.db, in).LatestStreamArn)
	f.fifo = !s.standard
	f.queue = testenv.Queue(t, f.sqs, f.fifo, s.queueAttrs)
	db := f.db
	if s.storeDB != nil {
		db = s.storeDB(f)
	}
	store, err := dynamostore.New(db, f.table, s.record)
	if err != nil {
		t.Fatal(err)
	}
	handle := s.handle
	if handle == nil {
		handle = charge
	}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
		o.Logger, o.ReadableIDs, o.Prefix = lambdakittest.Logger(t), true, "payment"
		o.Now = func() time.Time { return time.UnixMilli(f.now.Load()) }
		if s.opts != nil {
			s.opts(o)
		}
	})(lambdakit.Typed(func(ctx context.Context, p payment) error {
		f.runs.Add(1)
		if err := handle(ctx, f, p); err != nil {
			return err
		}
		if f.fail.Load() {
			return errors.New("the handler failed after it published")
		}
		return nil
	}))
	f.batch = lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = lambdakittest.Logger(t); o.AllowAllFailed = true })
	return f
}

func (f *onRecord) deliver(msgs ...events.SQSMessage) events.SQSEventResponse {
	f.t.Helper()
	return deliver(f.t, f.batch, msgs...)
}

// stream is the record table's stream as Lambda delivers it.
func (f *onRecord) stream() events.DynamoDBEvent {
	f.t.Helper()
	return readStream(f.t, f.streams, f.streamARN, f.region)
}

// relay runs the relay on ev and wants no failure.
func (f *onRecord) relay(ev events.DynamoDBEvent) {
	f.t.Helper()
	relay(f.t, f.sqs, ev)
}

// item is the payment's item, the record, as the table holds it.
func (f *onRecord) item(id string) map[string]types.AttributeValue {
	f.t.Helper()
	out, err := f.db.Scan(f.t.Context(), &dynamodb.ScanInput{TableName: aws.String(f.table)})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, it := range out.Items {
		if k, ok := it[f.names.IDAttr()].(*types.AttributeValueMemberS); ok && strings.HasSuffix(k.Value, id) {
			return it
		}
	}
	f.t.Fatalf("no item for %s among %d", id, len(out.Items))
	return nil
}

func str(it map[string]types.AttributeValue, name string) string {
	if s, ok := it[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// kinds is the event names of ev's records, in order.
func kinds(ev events.DynamoDBEvent) []string {
	var out []string
	for _, r := range ev.Records {
		out = append(out, r.EventName)
	}
	return out
}

// wantSent checks that msg is payment id's event of the completion of
// item under its lease: its ID, deduplication ID, group and body.
func wantSent(t *testing.T, f *onRecord, msg sqstypes.Message, item map[string]types.AttributeValue, id, customer string) {
	t.Helper()
	want := outbox.RecordMessageID(str(item, f.names.IDAttr()), str(item, "lease"), f.queue, "payment.charged")
	if got := aws.ToString(msg.MessageAttributes[outbox.IDAttribute].StringValue); got != want {
		t.Errorf("attribute %s = %q; want %s, from the record, its lease and the message's name", outbox.IDAttribute, got, want)
	}
	dedup, group := outbox.DedupID(want), customer
	if !f.fifo {
		dedup, group = "", "" // a standard queue has neither
	}
	if msg.Attributes["MessageDeduplicationId"] != dedup || msg.Attributes["MessageGroupId"] != group {
		t.Errorf("deduplication ID %q, group %q; want %q and %q", msg.Attributes["MessageDeduplicationId"], msg.Attributes["MessageGroupId"], dedup, group)
	}
	if !strings.Contains(aws.ToString(msg.Body), fmt.Sprintf("%q", id)) || aws.ToString(msg.MessageAttributes["type"].StringValue) != "payment.charged" {
		t.Errorf("body %s, attributes %v; want %s's event", aws.ToString(msg.Body), msg.MessageAttributes, id)
	}
}

// One message per completion, none for a duplicate, a lock or a release:
// a payment charged and delivered again, and one whose handler failed
// (its lock released), make one message, the charged payment's; its
// messages stay on its item. The queue is a standard one, whose
// deduplication hides no second send.
func TestPublishOnRecordOneMessagePerCompletion(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{standard: true})
	m := pay("pay_1", "cus_A", 100)
	f.deliver(m)
	f.deliver(lambdakittest.Redelivery(m))
	f.fail.Store(true)
	if resp := f.deliver(pay("pay_2", "cus_A", 200)); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("failures %v; want pay_2's", resp.BatchItemFailures)
	}
	ev := f.stream()
	// pay_1's lock and completion, pay_2's lock and release.
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY INSERT REMOVE" {
		t.Fatalf("stream %s; want INSERT MODIFY INSERT REMOVE", got)
	}
	f.relay(ev)
	got := testenv.Drain(t, f.sqs, f.queue)
	if len(got) != 1 {
		t.Fatalf("downstream holds %d messages; want 1", len(got))
	}
	item := f.item("pay_1")
	wantSent(t, f, got[0], item, "pay_1", "cus_A")
	if l, ok := item["messages"].(*types.AttributeValueMemberL); !ok || len(l.Value) != 1 || item["amount"] == nil {
		t.Errorf("item %v; want the payment with its one message kept on it", item)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times; want 2 (pay_1 once, pay_2 once)", n)
	}
}

// A completion whose answer was lost is sent again by the SDK and changes
// nothing: DynamoDB Streams records nothing for it, moto 5.2.1 records a
// second MODIFY of the completed record under the same lease. Either way
// the relay sends one message (to a standard queue, whose deduplication
// hides no second send), with the same ID.
func TestPublishOnRecordRetriedCompletionSendsOnce(t *testing.T) {
	var proxy *testenv.Proxy
	f := newOnRecord(t, onRecordSetup{standard: true, storeDB: func(f *onRecord) *dynamodb.Client {
		proxy = testenv.NewProxy(t, moto.Server(t).URL)
		return dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL) })
	}})
	proxy.LoseAnswer("UpdateItem", 1, http.StatusInternalServerError, testenv.DynamoDBError("InternalServerError", "answer lost"))
	if resp := f.deliver(pay("pay_3", "cus_B", 300)); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v; want none", resp.BatchItemFailures)
	}
	if n := proxy.Count("UpdateItem"); n != 2 {
		t.Fatalf("%d completions sent; want 2 (one lost, its retry)", n)
	}
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY MODIFY" {
		t.Fatalf("stream %s; want moto's INSERT MODIFY MODIFY (the lock, the completion, its retry)", got)
	}
	// On AWS the stream holds the lock and the completion only.
	for _, recs := range [][]events.DynamoDBEventRecord{ev.Records, ev.Records[:2]} {
		f.relay(events.DynamoDBEvent{Records: recs})
		got := testenv.Drain(t, f.sqs, f.queue)
		if len(got) != 1 {
			t.Fatalf("relaying %v: the queue holds %d messages; want 1", kinds(events.DynamoDBEvent{Records: recs}), len(got))
		}
		wantSent(t, f, got[0], f.item("pay_3"), "pay_3", "cus_B")
	}
}

// Under StagedOnly the completion creates the record (an INSERT of a
// completed record), and once it expired a new completion replaces it (a
// MODIFY from completed to completed under a new lease): each sends its
// message, with IDs of its own. The relay crashed after its sends and
// sends them all again: the FIFO queue drops the copies.
func TestPublishOnRecordStagedOnlyAndAfterExpiry(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{opts: func(o *lambdakit.Options) { o.StagedOnly, o.TTL, o.CacheSize = true, time.Minute, -1 }})
	m := pay("pay_4", "cus_C", 400)
	f.deliver(m)
	first := f.item("pay_4")
	f.now.Add((2 * time.Minute).Milliseconds())
	f.deliver(lambdakittest.Redelivery(m))
	second := f.item("pay_4")
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY" {
		t.Fatalf("stream %s; want INSERT MODIFY", got)
	}
	f.relay(ev)
	f.relay(ev)
	got := testenv.Drain(t, f.sqs, f.queue)
	if len(got) != 2 || str(first, "lease") == str(second, "lease") {
		t.Fatalf("downstream holds %d messages, leases %s and %s; want 2, under two leases", len(got), str(first, "lease"), str(second, "lease"))
	}
	wantSent(t, f, got[0], first, "pay_4", "cus_C")
	wantSent(t, f, got[1], second, "pay_4", "cus_C")
}

// What the record cannot carry is refused when it is published, before
// the work: a message SQS would refuse (no group on a FIFO queue), a
// message that repeats another, messages that with the item make it
// larger than DynamoDB's 400 KB (in either order); and an item that
// names the messages' attribute. Nothing is written for the refused ones.
func TestPublishOnRecordRefusedBeforeTheWork(t *testing.T) {
	big := strings.Repeat("x", 300*1024)
	var mu sync.Mutex
	errs := map[string]error{}
	f := newOnRecord(t, onRecordSetup{handle: func(ctx context.Context, f *onRecord, p payment) error {
		mu.Lock()
		defer mu.Unlock()
		ok := outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "ok", Body: "ok"}
		switch p.ID {
		case "no_group":
			errs[p.ID] = outbox.PublishOnRecord(ctx, outbox.Message{QueueURL: f.queue, Body: "no group"})
		case "repeat":
			_ = outbox.PublishOnRecord(ctx, ok)
			errs[p.ID] = outbox.PublishOnRecord(ctx, ok)
		case "item_first":
			_ = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"doc": &types.AttributeValueMemberS{Value: big}})
			errs[p.ID] = outbox.PublishOnRecord(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: big[:150*1024]})
		case "own_attribute":
			errs[p.ID] = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"messages": &types.AttributeValueMemberS{Value: "mine"}})
		case "messages_first":
			_ = outbox.PublishOnRecord(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: big})
			errs[p.ID] = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"doc": &types.AttributeValueMemberS{Value: big[:150*1024]}})
		}
		return nil
	}})
	f.deliver(pay("no_group", "c", 1), pay("repeat", "c", 1), pay("item_first", "c", 1), pay("messages_first", "c", 1), pay("own_attribute", "c", 1))
	for id, want := range map[string]error{
		"no_group": outbox.ErrInvalidMessage, "repeat": outbox.ErrInvalidMessage,
		"item_first": lambdakit.ErrStagedTooLarge, "messages_first": lambdakit.ErrStagedTooLarge,
	} {
		err := errs[id]
		if !errors.Is(err, want) || !lambdakit.IsPermanent(err) {
			t.Errorf("%s: %v; want a permanent error wrapping %v", id, err, want)
		}
	}
	if err := errs["own_attribute"]; !errors.Is(err, lambdakit.ErrInvalidItem) {
		t.Errorf("an item naming the messages' attribute: %v; want ErrInvalidItem", err)
	}
	if !errors.Is(errs["item_first"], outbox.ErrInvalidMessage) || !errors.Is(errs["messages_first"], lambdakit.ErrInvalidItem) {
		t.Errorf("item first: %v; messages first: %v; want the message refused, then the item", errs["item_first"], errs["messages_first"])
	}
	f.relay(f.stream())
	// What was accepted is sent: repeat's first message and
	// messages_first's large one.
	if got := testenv.Drain(t, f.sqs, f.queue); len(got) != 2 {
		t.Errorf("downstream holds %d messages; want 2", len(got))
	}
}

// A message over its queue's MaximumMessageSize is one SQS refuses: told
// the queue's limit (MaxMessageSize), PublishOnRecord refuses it before
// the work, permanently, and nothing is written for it. Not told, the
// outbox takes the queue for one of 1 MiB: the message is committed with
// the work, and SQS refuses it when the relay sends it, the failure the
// field exists to prevent. (moto counts the body alone against the
// queue's limit; SQS counts the attributes too, as Check does.)
func TestPublishOnRecordRefusesAMessageOverItsQueuesMaxMessageSize(t *testing.T) {
	body := strings.Repeat("x", 1100)
	var mu sync.Mutex
	errs := map[string]error{}
	f := newOnRecord(t, onRecordSetup{standard: true, queueAttrs: map[string]string{"MaximumMessageSize": "1024"},
		handle: func(ctx context.Context, f *onRecord, p payment) error {
			m := outbox.Message{QueueURL: f.queue, Name: "payment.charged", Body: body}
			if p.ID == "told" {
				m.MaxMessageSize = 1024
			}
			err := outbox.PublishOnRecord(ctx, m)
			mu.Lock()
			errs[p.ID] = err
			mu.Unlock()
			return err
		}})
	resp := f.deliver(pay("told", "c", 1))
	if err := errs["told"]; !errors.Is(err, outbox.ErrInvalidMessage) || !lambdakit.IsPermanent(err) || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("told the queue's limit: %v, failures %v; want a permanent ErrInvalidMessage, the record failed", err, resp.BatchItemFailures)
	}
	if ev := f.stream(); len(ev.Records) > 0 {
		for _, r := range ev.Records {
			if _, ok := r.Change.NewImage[f.names.MessagesAttr]; ok {
				t.Fatalf("a stream record carries the refused message: %v", kinds(ev))
			}
		}
	}
	f.deliver(pay("untold", "c", 1))
	if err := errs["untold"]; err != nil {
		t.Fatalf("not told the queue's limit: %v; want the message taken, as for a queue of 1 MiB", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(ctx, f.stream())
	if err == nil && len(out.BatchItemFailures) == 0 {
		t.Fatal("the relay sent the untold message; want SQS to refuse it, as over the queue's MaximumMessageSize")
	}
	if got := testenv.Drain(t, f.sqs, f.queue); len(got) != 0 {
		t.Errorf("the queue holds %d messages; want none", len(got))
	}
}

// Messages on the record cost no request: a completion with messages is
// the lock and one UpdateItem, as one without; no transaction. And no
// write unit while the item stays under 1 KB: DynamoDB bills a write by
// the larger of the item's sizes before and after it, in 1 KB units, so
// the test's payment with its event is 1 unit per request. (moto reports
// 0.5 units for any small write, not DynamoDB's billing: the test
// bounds the item's size rather than reading moto's consumed capacity.)
func TestPublishOnRecordWritesNoMoreRequests(t *testing.T) {
	var calls testenv.Counter
	f := newOnRecord(t, onRecordSetup{
		storeDB: func(f *onRecord) *dynamodb.Client {
			return dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
		},
		handle: func(ctx context.Context, f *onRecord, p payment) error {
			if p.Amount == 0 {
				return dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "0"}})
			}
			return charge(ctx, f, p)
		},
	})
	f.deliver(pay("plain", "cus_D", 0))
	without := calls.Counts()
	calls.Reset()
	f.deliver(pay("with", "cus_D", 5))
	with := calls.Counts()
	if fmt.Sprint(with) != fmt.Sprint(without) || with["UpdateItem"] != 1 || with["TransactWriteItems"] != 0 {
		t.Errorf("requests with messages %v, without %v; want the same, one UpdateItem and no transaction", with, without)
	}
	size := dynamostore.ItemSize(f.item("with"))
	if size >= 1024 {
		t.Errorf("the payment with its event is about %d bytes; want under 1 KB, one write unit per request", size)
	}
	t.Logf("the payment's item with its event: at most %d bytes", size)
}

// A record table whose stream holds new images only (NEW_IMAGE) cannot
// tell a completion from a later update of the completed record: the
// relay refuses its first update, sending nothing, rather than send the
// messages again for every update (a standard queue keeps each copy, and
// past 5 minutes a FIFO queue does too). Its locks and creations, which
// need no old image, go through.
func TestRelayRefusesRecordStreamWithoutOldImages(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{standard: true, view: types.StreamViewTypeNewImage})
	f.deliver(pay("pay_6", "cus_F", 600))
	// Other code updates the payment later, under the same lease.
	if _, err := f.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(f.table),
		Key:                       map[string]types.AttributeValue{"id": f.item("pay_6")["id"]},
		UpdateExpression:          aws.String("SET note = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberS{Value: "refund asked"}},
	}); err != nil {
		t.Fatal(err)
	}
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY MODIFY" {
		t.Fatalf("stream %s; want INSERT MODIFY MODIFY (the lock, the completion, the later update)", got)
	}
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[1].Change.SequenceNumber {
		t.Errorf("failures %v; want the completion's stream record, %s", resp.BatchItemFailures, ev.Records[1].Change.SequenceNumber)
	}
	if got := testenv.Drain(t, f.sqs, f.queue); len(got) != 0 {
		t.Errorf("downstream holds %d messages; want none", len(got))
	}
}

// A stream of keys only carries no message: the relay fails the lock's
// stream record, rather than dead-letter each lock as no outbox item and
// skip each completion, losing its messages without a failure.
func TestRelayRefusesStreamOfKeysOnly(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{standard: true, view: types.StreamViewTypeKeysOnly})
	dlq := testenv.Queue(t, f.sqs, false, nil)
	f.deliver(pay("pay_7", "cus_G", 700))
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY" {
		t.Fatalf("stream %s; want INSERT MODIFY (the lock, the completion)", got)
	}
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
		o.Stream.Logger, o.DeadLetterQueueURL = lambdakittest.Logger(t), dlq
	})(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].Change.SequenceNumber {
		t.Errorf("failures %v; want the lock's stream record, %s", resp.BatchItemFailures, ev.Records[0].Change.SequenceNumber)
	}
	if got := testenv.Drain(t, f.sqs, dlq); len(got) != 0 {
		t.Errorf("the dead-letter queue holds %d messages; want none", len(got))
	}
}

// A completed record with messages but no lease (written by another
// writer, or older than leases) has no completion identity to derive its
// messages' IDs from: the relay sends none of them, and gives the stream
// record to its dead-letter queue with the reason, or fails it without
// one (ErrNoLease). (Taken, it sent them with IDs from an empty lease.)
func TestRelayRefusesCompletedRecordWithoutLease(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{standard: true})
	f.deliver(pay("pay_8", "cus_H", 800))
	foreign := f.item("pay_8")
	delete(foreign, f.names.LeaseAttr)
	foreign[f.names.IDAttr()] = &types.AttributeValueMemberS{Value: "payment#pay_9"}
	if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: foreign}); err != nil {
		t.Fatal(err)
	}
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY INSERT" {
		t.Fatalf("stream %s; want INSERT MODIFY INSERT (the lock, the completion, the foreign item)", got)
	}
	ev.Records = ev.Records[2:]
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("failures %v; want the foreign item's stream record", resp.BatchItemFailures)
	}
	dlq := testenv.Queue(t, f.sqs, false, nil)
	resp, err = outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
		o.Stream.Logger, o.DeadLetterQueueURL = lambdakittest.Logger(t), dlq
	})(t.Context(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("with a dead-letter queue: %v, failures %v; want the record dead-lettered", err, resp.BatchItemFailures)
	}
	if got := testenv.Drain(t, f.sqs, dlq); len(got) != 1 {
		t.Errorf("the dead-letter queue holds %d messages; want the foreign item's", len(got))
	}
	if got := testenv.Drain(t, f.sqs, f.queue); len(got) != 0 {
		t.Errorf("downstream holds %d messages; want none", len(got))
	}
}

// A relay told that two of the record's attributes share a name could
// never tell a completion: it fails when it is made.
func TestRelayRefusesRecordAttributesSharingAName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Relay with status and lease both named \"s\" did not panic")
		}
	}()
	outbox.Relay(nil, func(o *outbox.RelayOptions) { o.Record.StatusAttr, o.Record.LeaseAttr = "s", "s" })
}

// On a composite-key table (Powertools' layout), the relay reads the
// record's ID from the sort key, as the store writes it: each payment's
// message has the ID of its own record, not of the partition key value
// all the function's records share.
func TestPublishOnRecordOnCompositeKeyTable(t *testing.T) {
	layout := func(o *dynamostore.Options) { o.SortKeyAttr, o.StaticPartitionKey = "sk", "idempotency#payments" }
	f := newOnRecord(t, onRecordSetup{standard: true, record: layout})
	f.deliver(pay("pay_1", "cus_A", 100), pay("pay_2", "cus_B", 200))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
		o.Stream.Logger, o.Record = lambdakittest.Logger(t), f.names
	})(ctx, f.stream())
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("relay: %v, failures %v", err, resp.BatchItemFailures)
	}
	got := testenv.Drain(t, f.sqs, f.queue)
	if len(got) != 2 {
		t.Fatalf("downstream holds %d messages; want 2", len(got))
	}
	for _, msg := range got {
		id, customer := "pay_1", "cus_A"
		if strings.Contains(aws.ToString(msg.Body), "pay_2") {
			id, customer = "pay_2", "cus_B"
		}
		wantSent(t, f, msg, f.item(id), id, customer)
	}
}

// A relay whose record status attribute is the business item's own status
// field (the payment's CHARGED; the store's is record_status), as a relay
// without the table's attribute names reads the payments table, does not
// skip the completion in silence, its message never sent: it refuses the
// stream record (ErrNoRecordStatus), to the dead-letter queue with the
// reason. An item without messages (a decline) is still no concern of it.
func TestRelayRefusesMessagesOnAnItemWhoseStatusIsNoRecordStatus(t *testing.T) {
	f := newOnRecord(t, onRecordSetup{
		standard: true,
		record:   func(o *dynamostore.Options) { o.StatusAttr = "record_status" },
		handle: func(ctx context.Context, f *onRecord, p payment) error {
			if p.Amount == 0 { // declined: the status, no event
				return dynamostore.SetItem(ctx, map[string]types.AttributeValue{"status": &types.AttributeValueMemberS{Value: "DECLINED"}})
			}
			if err := dynamostore.SetItem(ctx, map[string]types.AttributeValue{"status": &types.AttributeValueMemberS{Value: "CHARGED"}}); err != nil {
				return err
			}
			return outbox.PublishOnRecord(ctx, outbox.Message{QueueURL: f.queue, Name: "payment.charged",
				Body: fmt.Sprintf(`{"type":"payment.charged","payment_id":%q}`, p.ID)})
		},
	})
	f.deliver(pay("pay_s1", "cus_S", 100), pay("pay_s2", "cus_S", 0))
	// The completions only, as a mapping's filter on completed records
	// (the sample's) hands them over: the locks, which lack the item's
	// status, would be dead-lettered as no outbox item anyway.
	ev := f.stream()
	if got := strings.Join(kinds(ev), " "); got != "INSERT MODIFY INSERT MODIFY" {
		t.Fatalf("stream %s; want each payment's lock and completion", got)
	}
	ev.Records = []events.DynamoDBEventRecord{ev.Records[1], ev.Records[3]}
	dlq := testenv.Queue(t, f.sqs, false, nil)
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) {
		o.Stream.Logger, o.DeadLetterQueueURL = lambdakittest.Logger(t), dlq
	})(t.Context(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("relay: %v, failures %v; want pay_s1's completion dead-lettered", err, resp.BatchItemFailures)
	}
	dead := testenv.Drain(t, f.sqs, dlq)
	if len(dead) != 1 || !strings.Contains(aws.ToString(dead[0].Body), "no record status") || !strings.Contains(aws.ToString(dead[0].Body), "pay_s1") {
		t.Errorf("the dead-letter queue holds %d messages; want pay_s1's completion, refused as having no record status", len(dead))
	}
	if got := testenv.Drain(t, f.sqs, f.queue); len(got) != 0 {
		t.Errorf("downstream holds %d messages; want none", len(got))
	}
}

// Two messages to one queue whose names are not UTF-8 ("\xff", "\xfe")
// are two names to Publish's checks, but the SDK sends each invalid byte
// as U+FFFD, so the record holds both as "\ufffd", and the relay would
// send both under one RecordMessageID: a consumer keyed by IDAttribute
// drops the second. They are refused before the work, or sent under two
// IDs. The queue is a standard one, whose deduplication hides nothing.
func TestPublishOnRecordNamesThatAreNotUTF8AreNotOneMessage(t *testing.T) {
	var pubErr error
	f := newOnRecord(t, onRecordSetup{standard: true, handle: func(ctx context.Context, f *onRecord, p payment) error {
		pubErr = outbox.PublishOnRecord(ctx,
			outbox.Message{QueueURL: f.queue, Name: "charged\xff", Body: "to ledger"},
			outbox.Message{QueueURL: f.queue, Name: "charged\xfe", Body: "to email"})
		return pubErr
	}})
	f.deliver(pay("pay_utf8", "cus_U", 1))
	if errors.Is(pubErr, outbox.ErrInvalidMessage) && lambdakit.IsPermanent(pubErr) {
		return // refused before anything committed: fine
	}
	f.relay(f.stream())
	ids := map[string]bool{}
	got := testenv.Drain(t, f.sqs, f.queue)
	for _, m := range got {
		ids[aws.ToString(m.MessageAttributes[outbox.IDAttribute].StringValue)] = true
	}
	if len(got) != 2 || len(ids) != 2 {
		t.Errorf("PublishOnRecord: %v; downstream holds %d messages under %d IDs; want them refused (ErrInvalidMessage), or two messages under two IDs", pubErr, len(got), len(ids))
	}
}

// Outside a handler run by lambdakit's idempotency middleware there is no
// record to carry the message: PublishOnRecord refuses it, and nothing is
// kept for a later completion.
func TestPublishOnRecordOutsideAHandlerIsNotStaging(t *testing.T) {
	err := outbox.PublishOnRecord(t.Context(), outbox.Message{QueueURL: "http://127.0.0.1:1/000000000000/q", Body: "{}"})
	if !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("PublishOnRecord outside a handler = %v; want ErrNotStaging", err)
	}
}

// PublishOnRecord runs on every record of a function that publishes on
// it: one message, with nothing staged before it, is checked without a
// slice of names or of messages seen, and made with its string values in
// one allocation. Measured as what a staging run (Once, on a memory
// store, which commits no messages: the run fails after the call, and
// releases) allocates with the call beyond what it allocates without it.
func TestPublishOnRecordOfOneMessageAllocatesLittle(t *testing.T) {
	msg := outbox.Message{QueueURL: "http://127.0.0.1:1/000000000000/events.fifo", GroupID: "cus_42", Name: "payment.charged",
		Body: `{"type":"payment.charged","payment_id":"pay_1"}`, Attributes: map[string]string{"type": "payment.charged"}}
	errStop := errors.New("stop after publishing")
	run := func(publish bool) float64 {
		once := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, func(o *lambdakit.Options) { o.Logger = lambdakit.NewLogger(io.Discard) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		i := 0
		return testing.AllocsPerRun(50, func() {
			i++
			_, err := once.Do(ctx, "pay_"+strconv.Itoa(i), nil, func(ctx context.Context) ([]byte, error) {
				if publish {
					if err := outbox.PublishOnRecord(ctx, msg); err != nil {
						return nil, err
					}
				}
				return nil, errStop
			})
			if !errors.Is(err, errStop) {
				t.Fatal(err)
			}
		})
	}
	// The ops slice, the message's map (its header and its group), its
	// string values, and the stage's list growing: 5 (10 before).
	if n := run(true) - run(false); n > 5 {
		t.Errorf("PublishOnRecord of one message made %.0f allocations; want at most 5", n)
	}
}
