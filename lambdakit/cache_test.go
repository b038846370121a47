package lambdakit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The warm cache (Options.CacheSize): completed records kept in
// the container, so that a duplicate is answered without a store request.

func TestIdempotentWarmCacheAnswersDuplicatesWithoutRequests(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx), func(o *lambdakit.Options) { o.CacheSize = 2 })
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := handle(t, h, msg); err != nil {
		t.Fatal(err)
	}
	before := store.Calls()
	got, err := handle(t, h, lambdakittest.Redelivery(msg))
	if err != nil || string(got) != `"ch_p1"` {
		t.Fatalf("got %s, %v; want the cached result", got, err)
	}
	if after := store.Calls(); after != before {
		t.Errorf("got store calls %+v after a cached duplicate; want still %+v", after, before)
	}
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 5))); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
		t.Errorf("cached key with another payload: got %v; want ErrPayloadMismatch", err)
	}
	// Two more keys push p1 out of a cache of two: the store answers again.
	for _, id := range []string{"p2", "p3"} {
		if _, err := handle(t, h, lambdakittest.Message(paymentBody(id, 1))); err != nil {
			t.Fatal(err)
		}
	}
	before = store.Calls()
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
		t.Fatal(err)
	}
	if got := store.Calls().Acquire - before.Acquire; got != 1 {
		t.Errorf("got %d acquires after eviction; want 1", got)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

// A handler that reuses one buffer for its results must not make a later
// duplicate replay another payment's result, from the warm cache or from a
// waiting message; and a caller that changes a replayed result must not
// change what the next duplicate gets.
func TestIdempotentCachedResultIsACopy(t *testing.T) {
	var buf []byte
	reuse := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		id, _ := lambdakit.KeyFromField("payment_id")(msg)
		buf = append(buf[:0], "ch_"+id...)
		return buf, nil
	})
	h := idempotent(&lambdakittest.MemoryStore{}, reuse, func(o *lambdakit.Options) { o.CacheSize = 10 })
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p2", 1))); err != nil {
		t.Fatal(err)
	}
	got, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1)))
	if err != nil || string(got) != "ch_p1" {
		t.Fatalf("duplicate of p1 from the warm cache: got %q, %v; want \"ch_p1\"", got, err)
	}
	copy(got, "XXXXX")
	again, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1)))
	if err != nil || string(again) != "ch_p1" {
		t.Errorf("duplicate after the caller changed a replayed result: got %q, %v; want \"ch_p1\"", again, err)
	}

	t.Run("waiting message in the container", func(t *testing.T) {
		var buf []byte
		gate := make(chan struct{})
		entered := make(chan struct{}, 1)
		h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			id, _ := lambdakit.KeyFromField("payment_id")(msg)
			if id == "w1" {
				entered <- struct{}{}
				<-gate
			}
			buf = append(buf[:0], "ch_"+id...)
			return buf, nil
		}))
		first := make(chan []byte, 1)
		go func() {
			res, _ := handle(t, h, lambdakittest.Message(paymentBody("w1", 1)))
			first <- res
		}()
		<-entered
		second := make(chan []byte, 1)
		go func() {
			res, _ := handle(t, h, lambdakittest.Message(paymentBody("w1", 1)))
			second <- res
		}()
		time.Sleep(50 * time.Millisecond) // the second joins the first's flight
		close(gate)
		<-first
		// The handler reuses its buffer for another payment before the
		// waiting message reads its replay.
		if _, err := handle(t, h, lambdakittest.Message(paymentBody("w2", 1))); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-second:
			if string(got) != "ch_w1" {
				t.Errorf("waiting duplicate: got %q; want \"ch_w1\"", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiting duplicate did not answer in 5 s")
		}
	})
}
