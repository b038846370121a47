package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func TestMain(m *testing.M) { dynamostoretest.Run(m) }

// fixture is the function on a ledger table of its own, its requests
// counted at the client.
type fixture struct {
	table string
	calls *testenv.Counter
	store *dynamostore.Store
	db    *dynamodb.Client // not counted
	// eventsQueue, if set, is where each entry publishes ledger.recorded.
	eventsQueue string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	local := dynamostoretest.Start(t)
	f := &fixture{table: local.NewTable(t), calls: new(testenv.Counter), db: local.Client()}
	store, err := dynamostore.New(local.Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, f.calls.APIOption) }), f.table)
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	return f
}

// container is a fresh container of the function: no cache of its own.
func (f *fixture) container() lambdakit.BatchFunc {
	return newHandler(f.store, f.eventsQueue, func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler); o.CacheSize = 100 })
}

func event(paymentID string) events.SQSMessage {
	return lambdakittest.Message(fmt.Sprintf(`{"type":"payment.charged","payment_id":%q,"order_id":"ord_1","customer_id":"cus_7","amount":1299,"currency":"EUR","charge_id":"ch_%s"}`, paymentID, paymentID))
}

func (f *fixture) run(t *testing.T, h lambdakit.BatchFunc, msgs ...events.SQSMessage) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := h(ctx, events.SQSEvent{Records: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (f *fixture) entry(t *testing.T, paymentID string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "entry#" + paymentID}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attr(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

func TestAnEventIsOneRequest(t *testing.T) {
	f := setup(t)
	h := f.container()
	if resp := f.run(t, h, event("pay_1")); len(resp.BatchItemFailures) > 0 {
		t.Fatalf("failures: %+v", resp.BatchItemFailures)
	}
	if f.calls.Total() != 1 || f.calls.Count("PutItem") != 1 {
		t.Errorf("requests %v; want one PutItem", f.calls.Counts())
	}
	e := f.entry(t, "pay_1")
	if attr(e, "customer_id") != "cus_7" || attr(e, "amount") != "1299" || attr(e, "charge_id") != "ch_pay_1" || attr(e, "status") != "COMPLETED" {
		t.Errorf("entry = %v", e)
	}
	if _, ok := e["expiration"]; ok {
		t.Error("the entry has a TTL; a ledger entry must stay")
	}

	f.calls.Reset()
	f.run(t, h, event("pay_1"))
	if f.calls.Total() != 0 {
		t.Errorf("warm duplicate: requests %v; want none", f.calls.Counts())
	}
	f.run(t, f.container(), lambdakittest.Redelivery(event("pay_1")))
	if f.calls.Total() != 1 || f.calls.Count("BatchGetItem") != 1 {
		t.Errorf("redelivered duplicate in a fresh container: requests %v; want the batch's read ahead", f.calls.Counts())
	}
}

// The same event in ten containers at once: one entry, every delivery
// succeeds.
func TestConcurrentDuplicatesWriteOneEntry(t *testing.T) {
	f := setup(t)
	var wg sync.WaitGroup
	failed := make(chan int, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed <- len(f.run(t, f.container(), event("pay_2")).BatchItemFailures)
		}()
	}
	wg.Wait()
	close(failed)
	for n := range failed {
		if n > 0 {
			t.Error("a delivery failed; want every duplicate answered")
		}
	}
	if f.calls.Count("PutItem") != 10 || f.calls.Total() != 10 {
		t.Errorf("requests %v; want one PutItem per delivery", f.calls.Counts())
	}
	if attr(f.entry(t, "pay_2"), "charge_id") != "ch_pay_2" {
		t.Error("no entry")
	}
}

func TestAnotherEventFailsPermanentlyWithoutARequest(t *testing.T) {
	if err := (ledger{}).record(t.Context(), charged{Type: "payment.refunded", PaymentID: "pay_3"}); !errors.Is(err, errNotCharged) || !lambdakit.IsPermanent(err) {
		t.Errorf("got %v; want a permanent errNotCharged", err)
	}
	f := setup(t)
	refund := lambdakittest.Message(`{"type":"payment.refunded","payment_id":"pay_3"}`)
	resp := f.run(t, f.container(), refund, event("pay_4"))
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != refund.MessageId {
		t.Errorf("got %+v; want the refund failed, alone", resp)
	}
	// StagedOnly runs the handler first: the refund sent nothing.
	if f.calls.Total() != 1 || f.calls.Count("PutItem") != 1 || f.entry(t, "pay_3") != nil {
		t.Errorf("requests %v; want the charge's one PutItem, none for the refund", f.calls.Counts())
	}
}

// publishing is a fixture whose entries publish ledger.recorded to a FIFO
// queue, on a ledger table with a stream of new and old images.
func publishing(t *testing.T) (*fixture, *sqs.Client, string) {
	t.Helper()
	local := dynamostoretest.Start(t)
	f := &fixture{table: testenv.Name(t) + "-ledger", calls: new(testenv.Counter), db: local.Client()}
	table := testenv.CreateTable(t, f.db, &dynamodb.CreateTableInput{
		TableName:            aws.String(f.table),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	var err error
	if f.store, err = dynamostore.New(local.Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, f.calls.APIOption) }), f.table); err != nil {
		t.Fatal(err)
	}
	sqsc := sqs.NewFromConfig(local.Config())
	f.eventsQueue = testenv.Queue(t, sqsc, true, nil)
	return f, sqsc, aws.ToString(table.LatestStreamArn)
}

// relayed runs the relay over the ledger table's whole stream, twice (a
// stream read again: the same deduplication IDs), and returns what reached
// the events queue.
func relayed(t *testing.T, sqsc *sqs.Client, f *fixture, streamARN string) []sqstypes.Message {
	t.Helper()
	local := dynamostoretest.Start(t)
	recs, err := ddbstream.Read(t.Context(), dynamodbstreams.NewFromConfig(local.Config()), streamARN, dynamostoretest.Region)
	if err != nil {
		t.Fatal(err)
	}
	relay := outbox.Relay(sqsc, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })
	for range 2 {
		if resp, err := relay(t.Context(), events.DynamoDBEvent{Records: recs}); err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("relay: %v, %+v", err, resp.BatchItemFailures)
		}
	}
	return testenv.Drain(t, sqsc, f.eventsQueue)
}

// With LEDGER_EVENTS_QUEUE_URL, each new entry publishes ledger.recorded
// on its own item: still one PutItem per event, the item under 1 KB (one
// write unit), none more for a duplicate, and the relay on the table's
// stream sends it once to its customer's group.
func TestEntryPublishesItsEventOnItsItem(t *testing.T) {
	f, sqsc, streamARN := publishing(t)
	if resp := f.run(t, f.container(), event("pay_5"), event("pay_6")); len(resp.BatchItemFailures) > 0 {
		t.Fatalf("failures: %+v", resp.BatchItemFailures)
	}
	f.run(t, f.container(), lambdakittest.Redelivery(event("pay_5")))
	if got := f.calls.Count("PutItem"); got != 2 || f.calls.Count("TransactWriteItems") != 0 {
		t.Errorf("requests %v; want one PutItem per entry (the duplicate found by the read ahead), no transaction", f.calls.Counts())
	}
	for _, id := range []string{"pay_5", "pay_6"} {
		if size := dynamostore.ItemSize(f.entry(t, id)); size > 1024 {
			t.Errorf("entry %s with its event is up to %d bytes; want at most 1 KB, one write unit", id, size)
		}
	}

	var ids []string
	for _, m := range relayed(t, sqsc, f, streamARN) {
		var ev recorded
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "ledger.recorded" || ev.ChargeID != "ch_"+ev.PaymentID || m.Attributes["MessageGroupId"] != "cus_7" {
			t.Errorf("event %+v in group %s; want the entry's ledger.recorded in group cus_7", ev, m.Attributes["MessageGroupId"])
		}
		ids = append(ids, ev.PaymentID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"pay_5", "pay_6"}) {
		t.Errorf("events for %v; want one per entry, pay_5 and pay_6", ids)
	}
}

// A charge ID holding a character SQS refuses in a message body (U+FFFE:
// the gateway chooses charge IDs, and functions/payment sends it escaped
// in its JSON) still makes its entry, and its ledger.recorded reaches the
// queue with the same charge ID. SQS refuses U+FFFE and U+FFFF in a body
// ("Message content" in the SQS quotas), and so does the outbox's check
// of a message it stages.
func TestChargeIDWithACharacterSQSRefusesIsRecordedAndPublished(t *testing.T) {
	f, sqsc, streamARN := publishing(t)
	// The body as functions/payment sends it: U+FFFE and U+FFFF as JSON
	// escapes.
	msg := lambdakittest.Message(`{"type":"payment.charged","payment_id":"pay_8","order_id":"ord_1","customer_id":"cus_7","amount":1299,"currency":"EUR","charge_id":"ch_\ufffe\uffff_9"}`)
	if resp := f.run(t, f.container(), msg); len(resp.BatchItemFailures) > 0 {
		t.Fatalf("failures: %+v; want the charge recorded", resp.BatchItemFailures)
	}
	const want = "ch_\ufffe\uffff_9"
	if got := attr(f.entry(t, "pay_8"), "charge_id"); got != want {
		t.Errorf("entry's charge_id = %q; want %q", got, want)
	}
	got := relayed(t, sqsc, f, streamARN)
	if len(got) != 1 {
		t.Fatalf("%d events; want one", len(got))
	}
	// moto 5.2.1 takes any body: the body is checked here as SQS would.
	body := aws.ToString(got[0].Body)
	if err := awsrules.CheckText(body); err != nil {
		t.Errorf("SQS would refuse the event: %v", err)
	}
	var ev recorded
	if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.ChargeID != want {
		t.Errorf("event %+v (%v); want charge_id %q", ev, err, want)
	}
}

// deadLetters keeps the reason of each message the batch sends to the
// dead-letter queue, by message ID.
type deadLetters struct {
	mu      sync.Mutex
	reasons map[string]error
}

func (d *deadLetters) SendDeadLetter(_ context.Context, msg *events.SQSMessage, reason error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reasons[msg.MessageId] = reason
	return nil
}

// withDeadLetters is a fresh container of the function whose batch sends
// the messages that fail permanently to dl, as the batch's default
// IsPermanent decides (Permanent, and lambdakit's poison).
func (f *fixture) withDeadLetters(dl *deadLetters) lambdakit.BatchFunc {
	return lambdakit.Batch(handler(f.store, f.eventsQueue, func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler); o.CacheSize = 100 }),
		func(o *lambdakit.BatchOptions) { o.DeadLetters = dl; o.Logger = slog.New(slog.DiscardHandler) })
}

// charge is the payment.charged body of paymentID with its fields
// replaced: a nil value leaves the field out.
func charge(paymentID string, fields map[string]any) events.SQSMessage {
	e := map[string]any{"type": "payment.charged", "payment_id": paymentID, "order_id": "ord_1", "customer_id": "cus_7",
		"amount": 1299, "currency": "EUR", "charge_id": "ch_" + paymentID}
	for k, v := range fields {
		if v == nil {
			delete(e, k)
		} else {
			e[k] = v
		}
	}
	body, _ := json.Marshal(e) // maps of strings and numbers always encode
	return lambdakittest.Message(string(body))
}

// An event the ledger can never record goes to the dead-letter queue at
// once, permanent, and writes nothing: its payment's entry stays free for
// the real event, which is then recorded.
func TestAnInvalidChargeIsDeadLetteredAndLeavesItsPaymentFree(t *testing.T) {
	f := setup(t)
	for i, c := range []struct {
		name   string
		fields map[string]any
	}{
		{"no amount", map[string]any{"amount": nil}},
		{"zero amount", map[string]any{"amount": 0}},
		{"negative amount", map[string]any{"amount": -1299}},
		{"fractional amount", map[string]any{"amount": 12.99}},
		{"amount as a string", map[string]any{"amount": "1299"}},
		{"no charge_id", map[string]any{"charge_id": nil}},
		{"no order_id", map[string]any{"order_id": nil}},
		{"no customer_id", map[string]any{"customer_id": nil}},
		{"no currency", map[string]any{"currency": nil}},
		{"unknown type", map[string]any{"type": "payment.recharged"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("pay_%d", 20+i)
			dl := &deadLetters{reasons: map[string]error{}}
			msg := charge(id, c.fields)
			if resp := f.run(t, f.withDeadLetters(dl), msg); len(resp.BatchItemFailures) > 0 {
				t.Fatalf("failures %+v; want the event dead-lettered", resp.BatchItemFailures)
			}
			if reason := dl.reasons[msg.MessageId]; !lambdakit.IsPermanent(reason) && !lambdakit.IsPoison(reason) {
				t.Errorf("dead-letter reason %v; want a permanent failure", reason)
			}
			if e := f.entry(t, id); e != nil {
				t.Errorf("entry written for an invalid event: amount %q, charge_id %q, order_id %q", attr(e, "amount"), attr(e, "charge_id"), attr(e, "order_id"))
			}
			real := charge(id, nil)
			if resp := f.run(t, f.withDeadLetters(dl), real); len(resp.BatchItemFailures) > 0 || dl.reasons[real.MessageId] != nil {
				t.Fatalf("the real event: failures %+v, dead-lettered with %v; want it recorded", resp.BatchItemFailures, dl.reasons[real.MessageId])
			}
			if e := f.entry(t, id); attr(e, "amount") != "1299" || attr(e, "charge_id") != "ch_"+id {
				t.Errorf("entry amount %q, charge_id %q; want the real charge", attr(e, "amount"), attr(e, "charge_id"))
			}
		})
	}
}

// Another payment.charged for a recorded payment (another charge or
// amount) is never taken for a duplicate: wherever it is found (the warm
// cache, the read ahead, the failed PutItem of a fresh container), it is
// ErrPayloadMismatch, poison, sent to the dead-letter queue, and the entry
// stays as it was.
func TestAnotherChargeForARecordedPaymentIsDeadLettered(t *testing.T) {
	f := setup(t)
	dl := &deadLetters{reasons: map[string]error{}}
	warm := f.withDeadLetters(dl)
	if resp := f.run(t, warm, charge("pay_9", nil)); len(resp.BatchItemFailures) > 0 || len(dl.reasons) > 0 {
		t.Fatalf("failures %+v, dead letters %v", resp.BatchItemFailures, dl.reasons)
	}
	others := map[string]map[string]any{"another charge": {"charge_id": "ch_other"}, "another amount": {"amount": 1300}}
	for name, fields := range others {
		for where, deliver := range map[string]func() events.SQSEventResponse{
			"warm container":  func() events.SQSEventResponse { return f.run(t, warm, charge("pay_9", fields)) },
			"fresh container": func() events.SQSEventResponse { return f.run(t, f.withDeadLetters(dl), charge("pay_9", fields)) },
			"redelivered, read ahead": func() events.SQSEventResponse {
				return f.run(t, f.withDeadLetters(dl), lambdakittest.Redelivery(charge("pay_9", fields)))
			},
		} {
			t.Run(name+" in a "+where, func(t *testing.T) {
				clear(dl.reasons)
				if resp := deliver(); len(resp.BatchItemFailures) > 0 {
					t.Fatalf("failures %+v; want the event dead-lettered", resp.BatchItemFailures)
				}
				if len(dl.reasons) != 1 {
					t.Fatalf("dead letters %v; want the event", dl.reasons)
				}
				for _, reason := range dl.reasons {
					if !errors.Is(reason, lambdakit.ErrPayloadMismatch) || !lambdakit.IsPoison(reason) {
						t.Errorf("reason %v; want ErrPayloadMismatch, poison", reason)
					}
				}
			})
		}
	}
	if e := f.entry(t, "pay_9"); attr(e, "amount") != "1299" || attr(e, "charge_id") != "ch_pay_9" {
		t.Errorf("entry %v; want the first charge", e)
	}
}

// Entries written before payload validation covered every field keep
// matching redeliveries of their own events: an entry holds the hash of
// its whole event (PayloadBody), which a switch to PayloadFields would
// change, and an entry without a hash at all (written with validation
// off) takes any event for its payment as a duplicate.
func TestEntriesMatchRedeliveriesOfTheirOwnEvents(t *testing.T) {
	f := setup(t)
	msg := charge("pay_9", nil)
	if resp := f.run(t, f.container(), msg); len(resp.BatchItemFailures) > 0 {
		t.Fatalf("failures %+v", resp.BatchItemFailures)
	}
	payload, err := lambdakit.PayloadBody(&msg)
	if err != nil {
		t.Fatal(err)
	}
	if got := attr(f.entry(t, "pay_9"), "validation"); got != lambdakit.KeyHash(payload) {
		t.Errorf("entry's validation %q; want the whole event's hash %q, as every entry so far holds", got, lambdakit.KeyHash(payload))
	}
	// The same event encoded otherwise (member order, spacing) is the
	// same event.
	reencoded := lambdakittest.Message(`{ "charge_id":"ch_pay_9","currency":"EUR","amount":1299,"customer_id":"cus_7","order_id":"ord_1","payment_id":"pay_9","type":"payment.charged" }`)
	if resp := f.run(t, f.container(), lambdakittest.Redelivery(reencoded)); len(resp.BatchItemFailures) > 0 {
		t.Errorf("re-encoded redelivery failed: %+v", resp.BatchItemFailures)
	}

	if _, err := f.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{TableName: aws.String(f.table), UpdateExpression: aws.String("REMOVE validation"),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "entry#pay_9"}}}); err != nil {
		t.Fatal(err)
	}
	f.calls.Reset()
	if resp := f.run(t, f.container(), lambdakittest.Redelivery(msg)); len(resp.BatchItemFailures) > 0 {
		t.Errorf("redelivery to an entry without a hash failed: %+v", resp.BatchItemFailures)
	}
	if f.calls.Count("PutItem") != 0 || attr(f.entry(t, "pay_9"), "charge_id") != "ch_pay_9" {
		t.Errorf("requests %v; want the duplicate answered by the read ahead, the entry unchanged", f.calls.Counts())
	}
}
