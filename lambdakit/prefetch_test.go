package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func payments(prefix string, n int) []events.SQSMessage {
	msgs := make([]events.SQSMessage, n)
	for i := range msgs {
		msgs[i] = lambdakittest.Message(paymentBody(fmt.Sprintf("%s-%d", prefix, i), 100))
	}
	return msgs
}

func redelivered(msgs []events.SQSMessage) []events.SQSMessage {
	out := make([]events.SQSMessage, len(msgs))
	for i, m := range msgs {
		out[i] = lambdakittest.Redelivery(m)
	}
	return out
}

func TestBatchReadAheadOfRedeliveries(t *testing.T) {
	// A validating middleware in front of Idempotent, as the payment
	// sample has: the read ahead must work through a chain.
	outer := func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			return next.Handle(ctx, msg)
		})
	}
	run := func(t *testing.T, store lambdakit.Store, fx *testenv.Counter, msgs []events.SQSMessage, opts ...func(*lambdakit.Options)) {
		t.Helper()
		h := lambdakit.Chain(charger(fx), outer, lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), append([]func(*lambdakit.Options){quiet}, opts...)...))
		b, _ := newBatch(h)
		resp, err := b(batchCtx(t), lambdakittest.Event(msgs...))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("got %v, %v; want every record done", resp.BatchItemFailures, err)
		}
	}

	t.Run("re-driven batch of completed records: one read, no lock, no run", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		first := payments("cold", 10)
		completeAll(t, store, first)
		before := store.Calls()
		fx := &testenv.Counter{}
		run(t, store, fx, redelivered(first))
		got := store.Calls()
		if got.GetRecords-before.GetRecords != 1 || got.Acquire != before.Acquire {
			t.Errorf("got %d reads and %d acquires; want 1 read and no acquire", got.GetRecords-before.GetRecords, got.Acquire-before.Acquire)
		}
		if n := fx.Total(); n != 0 {
			t.Errorf("handler ran %d times; want 0", n)
		}
	})

	t.Run("first delivery reads nothing ahead", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		run(t, store, &testenv.Counter{}, payments("new", 10))
		if got := store.Calls(); got.GetRecords != 0 || got.Acquire != 10 {
			t.Errorf("got %+v; want no read and 10 acquires", got)
		}
	})

	t.Run("mixed batch: only the records not found completed take the lock", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		done := payments("mixdone", 5)
		completeAll(t, store, done)
		before := store.Calls()
		// Redelivered but never completed (their first run failed), and
		// first deliveries.
		msgs := append(redelivered(done), redelivered(payments("mixfailed", 3))...)
		msgs = append(msgs, payments("mixnew", 2)...)
		fx := &testenv.Counter{}
		run(t, store, fx, msgs)
		got := store.Calls()
		if got.GetRecords-before.GetRecords != 1 || got.Acquire-before.Acquire != 5 {
			t.Errorf("got %d reads and %d acquires; want 1 read and 5 acquires", got.GetRecords-before.GetRecords, got.Acquire-before.Acquire)
		}
		if n := fx.Total(); n != 5 {
			t.Errorf("handler ran %d times; want 5", n)
		}
	})

	t.Run("PrefetchNever locks every record", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		first := payments("never", 4)
		completeAll(t, store, first)
		before := store.Calls()
		run(t, store, &testenv.Counter{}, redelivered(first), func(o *lambdakit.Options) { o.Prefetch = lambdakit.PrefetchNever })
		if got := store.Calls(); got.GetRecords != before.GetRecords || got.Acquire-before.Acquire != 4 {
			t.Errorf("got %+v after %+v; want no read and 4 acquires", got, before)
		}
	})

	t.Run("PrefetchAlways reads first deliveries too", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		first := payments("always", 4)
		completeAll(t, store, first)
		before := store.Calls()
		again := make([]events.SQSMessage, len(first))
		for i, m := range first {
			again[i] = lambdakittest.Message(m.Body) // a producer's retry: new message, count 1
		}
		run(t, store, &testenv.Counter{}, again, func(o *lambdakit.Options) { o.Prefetch = lambdakit.PrefetchAlways })
		if got := store.Calls(); got.GetRecords-before.GetRecords != 1 || got.Acquire != before.Acquire {
			t.Errorf("got %+v after %+v; want 1 read and no acquire", got, before)
		}
	})
}

// The read ahead only ever skips work for records it found completed and
// live, and it checks their payload like any duplicate.
func TestBatchReadAheadKeepsTheRules(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	done := lambdakittest.Message(paymentBody("rules-1", 100))
	completeAll(t, store, []events.SQSMessage{done})
	mismatch := lambdakittest.Redelivery(lambdakittest.Message(paymentBody("rules-1", 999)))
	// A record in progress elsewhere: the read ahead sees it, and must
	// leave it to the lock.
	holder := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet)(lambdakit.HandlerFunc(
		func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}))
	busy := lambdakittest.Message(paymentBody("rules-2", 100))
	hctx, stop := context.WithCancel(context.Background())
	held := make(chan struct{})
	go func() {
		defer close(held)
		_, _ = holder.Handle(hctx, &busy)
	}()
	defer func() { stop(); <-held }()
	waitFor(t, func() bool { return store.Calls().Acquire >= 2 })

	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx))
	b, logs := newBatch(h)
	resp, _ := b(batchCtx(t), lambdakittest.Event(mismatch, lambdakittest.Redelivery(busy)))
	wantFailed(t, resp, mismatch.MessageId, lambdakittest.Redelivery(busy).MessageId)
	_ = logs
	if n := fx.Total(); n != 0 {
		t.Errorf("handler ran %d times; want 0", n)
	}
	if _, err := handle(t, h, lambdakittest.Redelivery(mismatch)); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
		t.Errorf("got %v; want ErrPayloadMismatch", err)
	}
}

// The read ahead runs the middleware's KeyFunc on every record of the
// batch, including records the function routes elsewhere and that never
// reach this Idempotent. A KeyFunc written for the records that do reach it
// may panic on the others, in the goroutine of whichever record made the
// read ahead; that panic must fail nobody (it costs only the read ahead),
// since the record whose goroutine it ran in is a good one and the other
// record never calls the KeyFunc. Batch promises that a panic fails only
// its record. Were the good record failed, on a FIFO queue it would also
// stop its group, so the pair would come back together, again and again,
// until maxReceiveCount moved the good payment to the dead-letter queue,
// never charged.
func TestReadAheadPanicOfAnotherMessagesKeyFailsNoGoodMessage(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// Payments carry "payment": {"id": ...}; refunds are routed to a
	// handler of their own and have no "payment" object at all.
	paymentKey := func(msg *events.SQSMessage) (string, error) {
		var body struct {
			Payment *struct {
				ID string `json:"id"`
			} `json:"payment"`
		}
		if err := json.Unmarshal([]byte(msg.Body), &body); err != nil {
			return "", errors.Join(lambdakit.ErrInvalidKey, err)
		}
		return body.Payment.ID, nil // only payments get here: no nil check
	}
	fx := &testenv.Counter{}
	charge := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		fx.Add(msg.Body)
		return []byte(`"charged"`), nil
	})
	payments := lambdakit.Idempotent(store, paymentKey, quiet)(charge)
	refunds := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, nil
	})
	router := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if strings.Contains(msg.Body, `"refund"`) {
			return refunds.Handle(ctx, msg)
		}
		return payments.Handle(ctx, msg)
	})

	// Both come back after an earlier failed batch: receive count 2.
	pay := lambdakittest.Redelivery(lambdakittest.Message(`{"payment":{"id":"pay-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	refund := lambdakittest.Redelivery(lambdakittest.Message(`{"refund":{"id":"ref-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	b, logs := newBatch(router)
	resp, err := b(batchCtx(t), lambdakittest.Event(pay, refund))
	if err != nil {
		t.Errorf("got batch error %v; want none", err)
	}
	wantFailed(t, resp)
	if n := fx.Count(pay.Body); n != 1 {
		t.Errorf("payment charged %d times; want 1", n)
	}
	for id, line := range logs.byMessageID(t) {
		t.Logf("message %s failed: %v", id, line["reason"])
	}
}

// swappingStore is a MemoryStore whose batch read answers every ID with the
// record of another ID (a broken BatchGetter, or one keyed by something
// else): the read ahead must not replay one payment's result for another.
type swappingStore struct{ *lambdakittest.MemoryStore }

func (s swappingStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	all := s.Records()
	out := map[string]lambdakit.IdempotencyRecord{}
	for _, id := range ids {
		for other, rec := range all {
			if other != id {
				out[id] = rec // the map key is id, the record another's
				break
			}
		}
	}
	return out, nil
}

// The read ahead never replays one payment's record for another, runs an
// expired record again (once), and leaves every record to the lock when
// the batch read fails.
func TestReadAheadRegressions(t *testing.T) {
	t.Run("records under other IDs are not replayed", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		a, b := lambdakittest.Message(paymentBody("swap-a", 100)), lambdakittest.Message(paymentBody("swap-b", 200))
		completeAll(t, mem, []events.SQSMessage{a})
		fx := &testenv.Counter{}
		h := idempotent(swappingStore{mem}, charger(fx))
		batch, _ := newBatch(h)
		resp, err := batch(batchCtx(t), lambdakittest.Event(lambdakittest.Redelivery(a), lambdakittest.Redelivery(b)))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if fx.Count("swap-b") != 1 || fx.Count("swap-a") != 0 {
			t.Errorf("got %d runs of swap-a and %d of swap-b; want 0 and 1", fx.Count("swap-a"), fx.Count("swap-b"))
		}
	})

	t.Run("an expired completed record is run again, once", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		now := time.Now()
		clock := func() time.Time { return now }
		msg := lambdakittest.Message(paymentBody("expired-1", 100))
		first := idempotent(mem, charger(&testenv.Counter{}), func(o *lambdakit.Options) { o.Now = clock; o.TTL = time.Minute })
		if _, err := handle(t, first, msg); err != nil {
			t.Fatal(err)
		}
		later := func() time.Time { return now.Add(2 * time.Minute) }
		fx := &testenv.Counter{}
		h := idempotent(mem, charger(fx), func(o *lambdakit.Options) { o.Now = later; o.TTL = time.Minute })
		batch, _ := newBatch(h)
		again := lambdakittest.Redelivery(msg)
		resp, err := batch(batchCtx(t), lambdakittest.Event(again, lambdakittest.Redelivery(again)))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if n := fx.Count("expired-1"); n != 1 {
			t.Errorf("handler ran %d times; want 1", n)
		}
	})

	t.Run("a batch read that fails leaves every record to the lock", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		done := payments("readfail", 3)
		completeAll(t, mem, done)
		fx := &testenv.Counter{}
		h := idempotent(failingGetter{mem}, charger(fx))
		batch, _ := newBatch(h)
		resp, err := batch(batchCtx(t), lambdakittest.Event(redelivered(done)...))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if n := fx.Total(); n != 0 {
			t.Errorf("handler ran %d times; want 0 (duplicates found by the lock)", n)
		}
	})
}

type failingGetter struct{ *lambdakittest.MemoryStore }

func (failingGetter) GetRecords(context.Context, []string) (map[string]lambdakit.IdempotencyRecord, error) {
	return nil, errors.New("read failed")
}
