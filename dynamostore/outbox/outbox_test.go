package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// fixture is a consumer whose handler publishes "payment.charged" through
// the outbox, on moto_server: the idempotency table, the outbox table with
// its stream, a downstream FIFO queue, and the relay.
type fixture struct {
	t         *testing.T
	db        *dynamodb.Client
	streams   *dynamodbstreams.Client
	sqs       *sqs.Client
	region    string
	idem      string // the idempotency table
	outbox    string // the table
	streamARN string
	queue     string // the downstream queue's URL
	batch     lambdakit.BatchFunc
	runs      atomic.Int32
	// failAfterPublish makes the handler fail once it has published.
	failAfterPublish atomic.Bool
	// stage is written by the handler after its message, set before
	// deliver.
	stage []types.TransactWriteItem
}

type payment struct {
	ID       string `json:"payment_id"`
	Customer string `json:"customer_id"`
	Amount   int    `json:"amount"`
}

// newFixture is the consumer of the tests: its handler publishes
// "payment.charged" to a FIFO queue, then stages f.stage, then fails if
// f.failAfterPublish is set.
func newFixture(t *testing.T) *fixture {
	return newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		if err := ob.Publish(ctx, outbox.Message{
			QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged",
			Body:       fmt.Sprintf(`{"type":"payment.charged","payment_id":%q,"amount":%d}`, p.ID, p.Amount),
			Attributes: map[string]string{"type": "payment.charged"},
		}); err != nil {
			return err
		}
		if len(f.stage) > 0 {
			if err := dynamostore.Stage(ctx, f.stage...); err != nil {
				return err
			}
		}
		if f.failAfterPublish.Load() {
			return errors.New("the ledger write failed")
		}
		return nil
	}})
}

// setup is what a test chooses of its fixture: the downstream queue's
// kind, the handler, the Outbox's options and the store's client.
type setup struct {
	fifo    bool
	handle  func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error
	obOpts  func(*outbox.Options)
	opts    func(*lambdakit.Options)          // the consumer's, after the fixture's logger
	storeDB func(f *fixture) *dynamodb.Client // nil: f.db
}

// newFixtureWith makes the tables (the outbox's keyed as the docs say:
// partition key pk, sort key id, a stream of new images), the downstream
// queue and the consumer of s.
func newFixtureWith(t *testing.T, s setup) *fixture {
	cfg := moto.Config(t)
	ctx := t.Context()
	f := &fixture{t: t, db: dynamodb.NewFromConfig(cfg), streams: dynamodbstreams.NewFromConfig(cfg), sqs: sqs.NewFromConfig(cfg), region: cfg.Region}
	idem := testenv.Name(t) + "-idem"
	f.idem = idem
	if err := dynamostore.CreateTable(ctx, f.db, idem); err != nil {
		t.Fatal(err)
	}
	// Keyed as the docs say: partition key pk, sort key id.
	f.outbox, f.streamARN = testenv.StreamTable(t, f.db, "-outbox", "pk", "id")
	f.queue = testenv.Queue(t, f.sqs, s.fifo, nil)
	db := f.db
	if s.storeDB != nil {
		db = s.storeDB(f)
	}
	store, err := dynamostore.New(db, idem)
	if err != nil {
		t.Fatal(err)
	}
	var obFns []func(*outbox.Options)
	if s.obOpts != nil {
		obFns = append(obFns, s.obOpts)
	}
	ob, err := outbox.New(f.outbox, obFns...)
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*lambdakit.Options){func(o *lambdakit.Options) { o.Logger = lambdakittest.Logger(t) }}
	if s.opts != nil {
		opts = append(opts, s.opts)
	}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), opts...)(
		lambdakit.Typed(func(ctx context.Context, p payment) error {
			f.runs.Add(1)
			return s.handle(ctx, ob, f, p)
		}))
	f.batch = lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = lambdakittest.Logger(t); o.AllowAllFailed = true })
	return f
}

func (f *fixture) deliver(msgs ...events.SQSMessage) events.SQSEventResponse {
	f.t.Helper()
	return deliver(f.t, f.batch, msgs...)
}

// deliver runs batch on msgs, as Lambda would.
func deliver(t *testing.T, batch lambdakit.BatchFunc, msgs ...events.SQSMessage) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := batch(ctx, lambdakittest.Event(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// lease is the lease of the record recordID in the idempotency table.
func (f *fixture) lease(recordID string) string {
	f.t.Helper()
	out, err := f.db.GetItem(f.t.Context(), &dynamodb.GetItemInput{TableName: aws.String(f.idem), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: recordID}}})
	if err != nil {
		f.t.Fatal(err)
	}
	lease, _ := out.Item["lease"].(*types.AttributeValueMemberS)
	if lease == nil {
		f.t.Fatalf("record %s has no lease: %v", recordID, out.Item)
	}
	return lease.Value
}

// stream is the outbox table's stream as Lambda would deliver it.
func (f *fixture) stream() events.DynamoDBEvent {
	f.t.Helper()
	return readStream(f.t, f.streams, f.streamARN, f.region)
}

// readStream is the stream streamARN as Lambda would deliver it.
func readStream(t *testing.T, streams *dynamodbstreams.Client, streamARN, region string) events.DynamoDBEvent {
	t.Helper()
	recs, err := ddbstream.Read(t.Context(), streams, streamARN, region)
	if err != nil {
		t.Fatal(err)
	}
	return events.DynamoDBEvent{Records: recs}
}

// relay runs the relay on ev and wants no failure.
func (f *fixture) relay(ev events.DynamoDBEvent) {
	f.t.Helper()
	relay(f.t, f.sqs, ev)
}

// relay runs the relay, sending with client, on ev and wants no failure.
func relay(t *testing.T, client *sqs.Client, ev events.DynamoDBEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := outbox.Relay(client, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("relay: %v, failures %v", err, resp.BatchItemFailures)
	}
}

// downstream receives what the downstream queue holds, deleting it.
func (f *fixture) downstream() []sqstypes.Message {
	f.t.Helper()
	return testenv.Drain(f.t, f.sqs, f.queue)
}

// pay is a payment as a FIFO queue grouped by customer delivers it.
func pay(id, customer string, amount int) events.SQSMessage {
	return lambdakittest.Message(fmt.Sprintf(`{"payment_id":%q,"customer_id":%q,"amount":%d}`, id, customer, amount), lambdakittest.InGroup(customer))
}

// Consume once, commit once, publish once: a payment delivered twice and
// its event relayed twice make one downstream message, with the item's ID
// as its idempotency key and a deduplication ID from it.
func TestOneCommitOneMessage(t *testing.T) {
	f := newFixture(t)
	m := pay("pay_1", "cus_A", 100)
	f.deliver(m)
	f.deliver(lambdakittest.Redelivery(m))
	ev := f.stream()
	if len(ev.Records) != 1 || ev.Records[0].EventName != "INSERT" {
		t.Fatalf("stream records %+v; want one INSERT", ev.Records)
	}
	f.relay(ev)
	f.relay(ev) // the relay crashed after the send, before it answered: Lambda sends the batch again
	got := f.downstream()
	if len(got) != 1 {
		t.Fatalf("downstream holds %d messages; want 1", len(got))
	}
	img := ev.Records[0].Change.NewImage
	id := outbox.ItemID(img["recordId"].String(), f.lease(img["recordId"].String()), f.queue, "payment.charged")
	if img["id"].String() != id || img["pk"].String() != "group#cus_A" || !strings.HasSuffix(img["recordId"].String(), lambdakit.KeyHash("pay_1")) {
		t.Errorf("item %s of record %s; want the ID derived from pay_1's record and the name", img["id"].String(), img["recordId"].String())
	}
	msg := got[0]
	if a := msg.MessageAttributes[outbox.IDAttribute]; aws.ToString(a.StringValue) != id {
		t.Errorf("attribute %s = %q; want the item's ID %s", outbox.IDAttribute, aws.ToString(a.StringValue), id)
	}
	if aws.ToString(msg.MessageAttributes["type"].StringValue) != "payment.charged" || !strings.Contains(aws.ToString(msg.Body), `"payment_id":"pay_1"`) {
		t.Errorf("message %s, attributes %v; want the published body and attributes", aws.ToString(msg.Body), msg.MessageAttributes)
	}
	if msg.Attributes["MessageGroupId"] != "cus_A" || msg.Attributes["MessageDeduplicationId"] != outbox.DedupID(id) {
		t.Errorf("group %q, deduplication ID %q; want cus_A and %s", msg.Attributes["MessageGroupId"], msg.Attributes["MessageDeduplicationId"], outbox.DedupID(id))
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1", n)
	}
}

// A record that expired is new work when its key comes again: the
// handler runs again and its completion, under a new lease, publishes a
// message of its own, with an item and an ID of their own, as a message
// on the record does (TestPublishOnRecordStagedOnlyAndAfterExpiry). The
// first completion's item is still in the table (it outlives the record's
// TTL): written over, it would be a MODIFY the relay skips, and with the
// first one's deduplication ID a FIFO queue would drop it anyway.
func TestPublishAfterTheRecordExpiredSendsTheNewCompletionsMessage(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		return ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged", Body: p.ID})
	}, opts: func(o *lambdakit.Options) {
		o.TTL = time.Minute
		o.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	}})
	m := pay("pay_e", "cus_E", 1)
	f.deliver(m)
	now.Add((2 * time.Minute).Milliseconds())
	f.deliver(lambdakittest.Redelivery(m))
	if n := f.runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times; want 2, the record having expired", n)
	}
	ev := f.stream()
	f.relay(ev)
	f.relay(ev) // the relay crashed after its sends: the copies are dropped
	got := f.downstream()
	if len(got) != 2 {
		t.Fatalf("downstream holds %d messages (stream %s); want 2, one per completion", len(got), strings.Join(kinds(ev), " "))
	}
	if a, b := aws.ToString(got[0].MessageAttributes[outbox.IDAttribute].StringValue), aws.ToString(got[1].MessageAttributes[outbox.IDAttribute].StringValue); a == b {
		t.Errorf("both messages carry the ID %s; want one per completion", a)
	}
}

// No commit, no message: a handler that fails after publishing leaves no
// outbox item; its retry, which succeeds, leaves one.
func TestNoCommitNoMessage(t *testing.T) {
	f := newFixture(t)
	m := pay("pay_2", "cus_B", 200)
	f.failAfterPublish.Store(true)
	if resp := f.deliver(m); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("failures %v; want the message failed", resp.BatchItemFailures)
	}
	if ev := f.stream(); len(ev.Records) != 0 {
		t.Fatalf("stream records %+v after a failed handler; want none", ev.Records)
	}
	f.failAfterPublish.Store(false)
	f.deliver(lambdakittest.Redelivery(m))
	f.relay(f.stream())
	if got := f.downstream(); len(got) != 1 {
		t.Errorf("downstream holds %d messages; want 1", len(got))
	}
}

// A transaction DynamoDB cancels (another staged write's condition failed)
// commits nothing: no outbox item, no message.
func TestCancelledTransactionPublishesNothing(t *testing.T) {
	f := newFixture(t)
	f.stage = []types.TransactWriteItem{{ConditionCheck: &types.ConditionCheck{
		TableName:           aws.String(f.outbox),
		Key:                 map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "balance"}, "id": &types.AttributeValueMemberS{Value: "balance"}},
		ConditionExpression: aws.String("attribute_exists(id)"), // the balance item does not exist
	}}}
	if resp := f.deliver(pay("pay_3", "cus_C", 300)); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("failures %v; want the message failed", resp.BatchItemFailures)
	}
	if ev := f.stream(); len(ev.Records) != 0 {
		t.Errorf("stream records %+v after a cancelled transaction; want none", ev.Records)
	}
}

// Different payments are different messages, in their order within a
// customer's group.
func TestDifferentPaymentsInOrder(t *testing.T) {
	f := newFixture(t)
	f.deliver(pay("pay_a", "cus_D", 1), pay("pay_b", "cus_D", 2), pay("pay_c", "cus_E", 3))
	f.relay(f.stream())
	got := f.downstream()
	var order []string
	for _, m := range got {
		if m.Attributes["MessageGroupId"] == "cus_D" {
			order = append(order, aws.ToString(m.Body))
		}
	}
	if len(got) != 3 || len(order) != 2 || !strings.Contains(order[0], "pay_a") || !strings.Contains(order[1], "pay_b") {
		t.Errorf("downstream %d messages, cus_D's %v; want 3, pay_a before pay_b", len(got), order)
	}
}

// Publish outside an idempotent handler has no completion to commit with.
func TestPublishOutsideAHandler(t *testing.T) {
	ob, err := outbox.New("t")
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Publish(context.Background(), outbox.Message{QueueURL: "q", Body: "b"}); !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("got %v; want ErrNotStaging", err)
	}
}

// An item the relay cannot send fails its record, named by its sequence
// number; the items before it are sent, the ones after it wait.
func TestRelayStopsAtABadItem(t *testing.T) {
	f := newFixture(t)
	f.deliver(pay("pay_x", "cus_F", 1))
	ctx := t.Context()
	if _, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.outbox), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "outbox#bad"}, "id": &types.AttributeValueMemberS{Value: "outbox#bad"},
		"body": &types.AttributeValueMemberS{Value: "no queue"},
	}}); err != nil {
		t.Fatal(err)
	}
	f.deliver(pay("pay_y", "cus_F", 2))
	ev := f.stream()
	if len(ev.Records) != 3 {
		t.Fatalf("stream records %d; want 3", len(ev.Records))
	}
	resp, err := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[1].Change.SequenceNumber {
		t.Fatalf("relay: %v, failures %v; want the bad item's sequence number %s", err, resp.BatchItemFailures, ev.Records[1].Change.SequenceNumber)
	}
	if got := f.downstream(); len(got) != 1 || !strings.Contains(aws.ToString(got[0].Body), "pay_x") {
		t.Errorf("downstream %d messages; want pay_x's only", len(got))
	}
}

// Several invocations at once in one process (Lambda Managed Instances):
// aws-lambda-go puts each one's trace header in its context and leaves
// _X_AMZN_TRACE_ID unset (as it is in this test process), so the SDK adds
// none. The relay's sends, to the item's queue and to the dead-letter
// queue, carry the trace of the invocation that sends.
func TestRelaySendsTheInvocationTraceHeader(t *testing.T) {
	const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	f := newFixture(t)
	client, sent := testenv.TracedSQS(moto.Config(t))
	dlq := testenv.Queue(t, f.sqs, false, nil)
	f.deliver(pay("pay_t", "cus_T", 1))
	ev := f.stream()
	bad := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{ev.Records[0]}}
	bad.Records[0].Change.NewImage = map[string]events.DynamoDBAttributeValue{} // not an outbox item: dead-lettered
	for k, v := range ev.Records[0].Change.NewImage {
		if k != "body" {
			bad.Records[0].Change.NewImage[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	//lint:ignore SA1029 the key aws-lambda-go puts the trace header under
	ctx = context.WithValue(ctx, "x-amzn-trace-id", header)
	relay := outbox.Relay(client, func(o *outbox.RelayOptions) {
		o.Stream.Logger = lambdakittest.Logger(t)
		o.DeadLetterQueueURL = dlq
	})
	for _, e := range []events.DynamoDBEvent{ev, bad} {
		if resp, err := relay(ctx, e); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("relay: %v, failures %v", err, resp.BatchItemFailures)
		}
	}
	if got := sent(); len(got) != 2 || got[0] != header || got[1] != header {
		t.Errorf("X-Amzn-Trace-Id sent: %q; want the invocation's %q on the send and on the dead letter", got, header)
	}
}
