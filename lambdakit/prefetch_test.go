package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// completeAll runs msgs once through a fresh container, so that their
// records are completed in store.
func completeAll(t *testing.T, store lambdakit.Store, msgs []events.SQSMessage) {
	t.Helper()
	h := idempotent(store, charger(&testenv.Counter{}))
	for _, m := range msgs {
		if _, err := handle(t, h, m); err != nil {
			t.Fatal(err)
		}
	}
}

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
	run := func(t *testing.T, store lambdakit.Store, fx *testenv.Counter, msgs []events.SQSMessage, opts ...func(*lambdakit.IdempotencyOptions)) {
		t.Helper()
		h := lambdakit.Chain(charger(fx), outer, lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), append([]func(*lambdakit.IdempotencyOptions){quiet}, opts...)...))
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
		run(t, store, &testenv.Counter{}, redelivered(first), func(o *lambdakit.IdempotencyOptions) { o.Prefetch = lambdakit.PrefetchNever })
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
		run(t, store, &testenv.Counter{}, again, func(o *lambdakit.IdempotencyOptions) { o.Prefetch = lambdakit.PrefetchAlways })
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

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
