package lambdakit_test

// Poison messages: a message whose body or key lambdakit itself cannot get
// past fails permanently by default, so that with a dead-letter sender it
// goes to the DLQ on its first delivery and does not hold its FIFO group
// back; without one it fails and comes back, as it always did.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

const poisonPrefix = "poison"

func poisonPrefixed(o *lambdakit.Options) { o.Prefix = poisonPrefix }

// poisonFixture is a Batch over Idempotent(KeyFromField("payment_id")) and
// a typed charger, on a memory store that already holds pay_m (amount 1,
// completed) and pay_busy (in progress in another invocation).
type poisonFixture struct {
	store   *lambdakittest.MemoryStore
	charged *testenv.Counter
	h       lambdakit.Handler
}

func newPoisonFixture(t *testing.T) *poisonFixture {
	t.Helper()
	f := &poisonFixture{store: &lambdakittest.MemoryStore{}, charged: &testenv.Counter{}}
	f.h = idempotent(f.store, charger(f.charged), poisonPrefixed)
	if _, err := handle(t, f.h, lambdakittest.Message(paymentBody("pay_m", 1))); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	busy := lambdakit.IdempotencyRecord{
		ID: lambdakit.RecordID(poisonPrefix, "pay_busy"), Status: lambdakit.StatusInProgress,
		Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Hour), Lease: "another invocation",
	}
	if _, ok, err := f.store.Acquire(context.Background(), busy, now); err != nil || !ok {
		t.Fatalf("holding pay_busy: %v, %v", ok, err)
	}
	return f
}

// poisonMessages are one message for each error no redelivery can mend.
func poisonMessages() map[string]events.SQSMessage {
	return map[string]events.SQSMessage{
		"ErrDecode":          lambdakittest.Message(`{"payment_id":"pay_d","amount":"ten"}`),
		"ErrInvalidKey":      lambdakittest.Message(`payment_id=pay_x`),
		"ErrNoKey":           lambdakittest.Message(`{"amount":1}`),
		"ErrPayloadMismatch": lambdakittest.Message(paymentBody("pay_m", 2)),
	}
}

// idsOf returns the message IDs of msgs, sorted.
func idsOf(msgs map[string]events.SQSMessage) []string {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.MessageId)
	}
	slices.Sort(ids)
	return ids
}

func TestPoisonGoesToTheDeadLetterQueueByDefault(t *testing.T) {
	f := newPoisonFixture(t)
	dlq := &deadLetters{}
	batch, _ := newBatch(f.h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	poison := poisonMessages()
	busy := lambdakittest.Message(paymentBody("pay_busy", 1)) // ErrInProgress: may pass later
	good := lambdakittest.Message(paymentBody("pay_ok", 1))
	msgs := append([]events.SQSMessage{busy, good}, slices.Collect(maps.Values(poison))...)
	resp, err := batch(batchCtx(t), lambdakittest.Event(msgs...))
	if err != nil {
		t.Fatalf("batch error %v; want none", err)
	}
	wantFailed(t, resp, busy.MessageId)
	got := dlq.ids()
	slices.Sort(got)
	if want := idsOf(poison); !slices.Equal(got, want) {
		t.Errorf("dead letters %q; want the poison messages %q", got, want)
	}
	if n := f.charged.Count("pay_ok"); n != 1 {
		t.Errorf("pay_ok charged %d times; want 1", n)
	}
}

// A store that fails is not poison: the message comes back, and no
// dead-letter sender sees it.
func TestStoreErrorIsNotPoison(t *testing.T) {
	store := &storetest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 1, Seed: 1}
	dlq := &deadLetters{}
	batch, log := newBatch(idempotent(store, charger(&testenv.Counter{})), func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	m := lambdakittest.Message(paymentBody("pay_s", 1))
	resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
	wantFailed(t, resp, m.MessageId)
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q; want none", got)
	}
	if got := log.byMessageID(t)[m.MessageId]["reasonCode"]; got != string(lambdakit.ReasonStoreError) {
		t.Errorf("reasonCode %v; want %s", got, lambdakit.ReasonStoreError)
	}
}

// In a FIFO group, a poison message no longer holds the messages after it
// back until maxReceiveCount: it goes to the DLQ, and the group goes on.
func TestPoisonDoesNotHoldItsFIFOGroupBack(t *testing.T) {
	f := newPoisonFixture(t)
	dlq := &deadLetters{}
	batch, _ := newBatch(f.h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	bad := lambdakittest.Message(`{"payment_id":"pay_g1","amount":"ten"}`, lambdakittest.InGroup("cus_A"))
	next := lambdakittest.Message(paymentBody("pay_g2", 1), lambdakittest.InGroup("cus_A"))
	resp, err := batch(batchCtx(t), lambdakittest.Event(bad, next))
	if err != nil {
		t.Fatalf("batch error %v; want none", err)
	}
	wantFailed(t, resp)
	if got := dlq.ids(); !slices.Equal(got, []string{bad.MessageId}) {
		t.Errorf("dead letters %q; want %q", got, bad.MessageId)
	}
	if n := f.charged.Count("pay_g2"); n != 1 {
		t.Errorf("the message after the poison one charged %d times; want 1", n)
	}
}

// Without a dead-letter sender nothing changes: poison fails, is reported,
// and comes back, with the reason it always had, until the queue's redrive
// policy moves it.
func TestPoisonWithoutDeadLetterQueueFailsAsBefore(t *testing.T) {
	f := newPoisonFixture(t)
	batch, log := newBatch(f.h)
	poison := poisonMessages()
	resp, _ := batch(batchCtx(t), lambdakittest.Event(slices.Collect(maps.Values(poison))...))
	var failed []string
	for _, x := range resp.BatchItemFailures {
		failed = append(failed, x.ItemIdentifier)
	}
	slices.Sort(failed)
	if want := idsOf(poison); !slices.Equal(failed, want) {
		t.Errorf("failed %q; want every poison message %q", failed, want)
	}
	lines := log.byMessageID(t)
	for name, want := range map[string]lambdakit.Reason{
		"ErrDecode": lambdakit.ReasonHandlerError, "ErrInvalidKey": lambdakit.ReasonNoKey,
		"ErrNoKey": lambdakit.ReasonNoKey, "ErrPayloadMismatch": lambdakit.ReasonPayloadMismatch,
	} {
		line := lines[poison[name].MessageId]
		if line["reasonCode"] != string(want) || line["outcome"] != "failed" {
			t.Errorf("%s: reasonCode %v, outcome %v; want %s, failed", name, line["reasonCode"], line["outcome"], want)
		}
	}
}

// Setting IsPermanent to lambdakit.IsPermanent opts out: only errors marked
// with Permanent go to the DLQ, and poison comes back as it did before.
func TestPoisonOptOut(t *testing.T) {
	f := newPoisonFixture(t)
	dlq := &deadLetters{}
	batch, _ := newBatch(f.h, func(o *lambdakit.BatchOptions) {
		o.DeadLetters = dlq
		o.IsPermanent = lambdakit.IsPermanent
	})
	poison := poisonMessages()
	resp, _ := batch(batchCtx(t), lambdakittest.Event(slices.Collect(maps.Values(poison))...))
	if len(resp.BatchItemFailures) != len(poison) {
		t.Errorf("failed %v; want every poison message", resp.BatchItemFailures)
	}
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q; want none", got)
	}
	marked := lambdakittest.Message("poison marked")
	batch, _ = newBatch(failPoison, func(o *lambdakit.BatchOptions) {
		o.DeadLetters = dlq
		o.IsPermanent = lambdakit.IsPermanent
	})
	if resp, err := batch(batchCtx(t), lambdakittest.Event(marked)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("a message marked Permanent: %v, %v; want it sent to the DLQ", resp.BatchItemFailures, err)
	}
}

func TestIsPoison(t *testing.T) {
	ctx := context.Background()
	store := &lambdakittest.MemoryStore{}
	once := lambdakit.NewOnce(store, quiet)
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	if _, err := once.Do(ctx, "k", []byte(`{"a":1}`), nop); err != nil {
		t.Fatal(err)
	}
	// The verdicts lambdakit gives on the message it reads.
	h := idempotent(store, charger(&testenv.Counter{}))
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("pay_m", 1))); err != nil {
		t.Fatal(err)
	}
	_, decode := handle(t, h, lambdakittest.Message(`{"payment_id":"pay_d","amount":"ten"}`))
	_, invalid := handle(t, h, lambdakittest.Message(`not json`))
	_, noKey := handle(t, h, lambdakittest.Message(`{"amount":1}`))
	_, mismatch := handle(t, h, lambdakittest.Message(paymentBody("pay_m", 2)))
	id := "pay_b"
	_, badPayload := handle(t, lambdakit.Idempotent(store, lambdakit.KeyFromAttribute("id"), quiet, func(o *lambdakit.Options) {
		o.Payload = lambdakit.PayloadFields("amount")
	})(noop), events.SQSMessage{Body: `not json`, MessageAttributes: map[string]events.SQSMessageAttribute{
		"id": {DataType: "String", StringValue: &id},
	}})
	// The same sentinels from calls of the handler's own.
	_, nestedMismatch := once.Do(ctx, "k", []byte(`{"a":2}`), nop)
	_, nestedEmptyKey := once.Do(ctx, "", nil, nop)
	_, bareKey := lambdakit.KeyFromField("id")(&events.SQSMessage{Body: `{}`})
	_, inProgress := lambdakit.NewOnce(heldStore{store}, quiet).Do(ctx, "busy", nil, nop)
	_, storeErr := lambdakit.NewOnce(&storetest.FaultyStore{Store: store, Rate: 1, Seed: 1}, quiet).Do(ctx, "s", nil, nop)

	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"the body does not decode":       {decode, true},
		"the key is unreadable":          {invalid, true},
		"no key":                         {noKey, true},
		"the key's payload differs":      {mismatch, true},
		"the payload is unreadable":      {badPayload, true},
		"wrapped":                        {fmt.Errorf("handler: %w", decode), true},
		"a nested Do's payload mismatch": {nestedMismatch, false},
		"a nested Do's empty key":        {nestedEmptyKey, false},
		"a KeyFunc's error, bare":        {bareKey, false},
		"ErrDecode, bare":                {fmt.Errorf("%w: a downstream reply", lambdakit.ErrDecode), false},
		"ErrInProgress":                  {inProgress, false},
		"a store error":                  {storeErr, false},
		"ErrThrottled":                   {lambdakit.ErrThrottled, false},
		"ErrLeaseLost":                   {lambdakit.ErrLeaseLost, false},
		"the deadline":                   {context.DeadlineExceeded, false},
		"cancelled at the deadline":      {fmt.Errorf("%w: %w", lambdakit.ErrCancelledAtDeadline, errors.New("slow")), false},
		"ErrNotStarted":                  {lambdakit.ErrNotStarted, false},
		"ErrSkipped":                     {lambdakit.ErrSkipped, false},
		"a handler's error":              {errors.New("gateway down"), false},
		"marked Permanent":               {lambdakit.Permanent(errBadFormat), false},
		"a panic with poison":            {&lambdakit.PanicError{Value: decode}, false},
		"nil":                            {nil, false},
	} {
		if c.err == nil && name != "nil" {
			t.Fatalf("%s: no error to test", name)
		}
		if got := lambdakit.IsPoison(c.err); got != c.want {
			t.Errorf("IsPoison(%s: %v) = %v; want %v", name, c.err, got, c.want)
		}
	}
	for name, err := range map[string]error{"ErrDecode": decode, "ErrInvalidKey": invalid, "ErrNoKey": noKey, "ErrPayloadMismatch": mismatch} {
		if want := map[string]error{"ErrDecode": lambdakit.ErrDecode, "ErrInvalidKey": lambdakit.ErrInvalidKey,
			"ErrNoKey": lambdakit.ErrNoKey, "ErrPayloadMismatch": lambdakit.ErrPayloadMismatch}[name]; !errors.Is(err, want) {
			t.Errorf("%v does not wrap %s: marking poison must keep the chain", err, name)
		}
	}
}

// Poison is the delivered message's: the same sentinel errors met by the
// handler's own code — a Typed handler it runs on a downstream reply, a
// nested Once.Do with an empty key or another payload, an error of its own
// wrapping ErrDecode — are retryable, and never send the message to the
// dead-letter queue, with or without Idempotent around the handler. (Before
// the fix each of these was dead-lettered on its first delivery.)
func TestPoisonIsTheDeliveredMessagesOwn(t *testing.T) {
	type quote struct {
		Rate float64 `json:"rate"`
	}
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	for name, inner := range map[string]func(ctx context.Context, once *lambdakit.Once) error{
		"a Typed handler on a 503 reply": func(ctx context.Context, _ *lambdakit.Once) error {
			reply := &events.SQSMessage{Body: "<html>503 Service Unavailable</html>"}
			_, err := lambdakit.Typed(func(context.Context, quote) error { return nil }).Handle(ctx, reply)
			return fmt.Errorf("quote service: %w", err)
		},
		"a nested Once.Do with an empty key": func(ctx context.Context, once *lambdakit.Once) error {
			chargeID := "" // the provider did not answer with an ID this time
			_, err := once.Do(ctx, chargeID, nil, nop)
			return err
		},
		"a nested Once.Do with another payload": func(ctx context.Context, once *lambdakit.Once) error {
			if _, err := once.Do(ctx, "quote", []byte(`{"v":1}`), nop); err != nil {
				return err
			}
			_, err := once.Do(ctx, "quote", []byte(`{"v":2}`), nop)
			return err
		},
		"an error of its own wrapping ErrDecode": func(context.Context, *lambdakit.Once) error {
			return fmt.Errorf("%w: quote reply", lambdakit.ErrDecode)
		},
	} {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/idempotent=%v", name, wrapped), func(t *testing.T) {
				once := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
				var h lambdakit.Handler = lambdakit.Typed(func(ctx context.Context, p payment) error {
					err := inner(ctx, once)
					if err == nil {
						t.Fatal("the inner call did not fail")
					}
					return err
				})
				if wrapped {
					h = idempotent(&lambdakittest.MemoryStore{}, h)
				}
				dlq := &deadLetters{}
				batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
				m := lambdakittest.Message(paymentBody("pay_q", 1))
				resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
				if got := dlq.ids(); len(got) != 0 {
					t.Errorf("dead letters %q; want none: the message itself was read, the handler's own call failed", got)
				}
				wantFailed(t, resp, m.MessageId)
			})
		}
	}
}

// heldStore answers every Acquire with a record in progress under another
// lease.
type heldStore struct{ lambdakit.Store }

func (s heldStore) Acquire(_ context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	rec.Lease = "another invocation"
	return rec, false, nil
}

// Poison sent to the dead-letter queue is counted as a permanent failure,
// as its log line says (reasonCode Permanent): an alarm on the default
// metric FailedPermanent must see it.
func TestPoisonDeadLetteredCountsAsFailedPermanent(t *testing.T) {
	f := newPoisonFixture(t)
	poison := poisonMessages()
	var out bytes.Buffer
	batch, log := newBatch(f.h, func(o *lambdakit.BatchOptions) {
		o.DeadLetters = &deadLetters{}
		o.MetricsWriter = &out
	})
	if _, err := batch(batchCtx(t), lambdakittest.Event(slices.Collect(maps.Values(poison))...)); err != nil {
		t.Fatalf("batch error %v; want none", err)
	}
	m := emfLine(t, bytes.TrimSpace(out.Bytes()))
	if m["Failed"] != float64(len(poison)) || m["FailedPermanent"] != float64(len(poison)) {
		t.Errorf("got Failed %v, FailedPermanent %v; want %d each", m["Failed"], m["FailedPermanent"], len(poison))
	}
	for name, msg := range poison {
		if line := log.byMessageID(t)[msg.MessageId]; line["reasonCode"] != "Permanent" {
			t.Errorf("%s: log line %v; want reasonCode Permanent", name, line)
		}
	}
}

// A handler that panics with a Permanent error is not dead-lettered by the
// default: a panic is a bug a retry after a fix mends, whatever its value.
func TestPanicWithPermanentValueIsNotDeadLettered(t *testing.T) {
	dlq := &deadLetters{}
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		panic(lambdakit.Permanent(errors.New("card expired")))
	})
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
	m := lambdakittest.Message(paymentBody("pay_panic", 1))
	resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
	wantFailed(t, resp, m.MessageId)
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q; want none: a panic is retried", got)
	}
}
