package lambdakit_test

// Regression tests for defects an adversarial review found in code that
// passed every other test: each failed before its fix.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Only a body that truly has no key may run without idempotency: a body
// whose key cannot be read safely must fail, whatever ProcessWithoutKey says.
func TestIdempotentProcessWithoutKeyRefusesUnreadableKeys(t *testing.T) {
	bodies := map[string]string{
		"key named again in other case":   `{"payment_id":"p1","PAYMENT_ID":"p2"}`,
		"trailing bytes after the object": `{"payment_id":"p1"} {"payment_id":"p2"}`,
		"not JSON":                        `payment_id=p1`,
		"truncated":                       `{"payment_id":"p1"`,
		"key is an object":                `{"payment_id":{"id":"p1"}}`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			store := &lambdakittest.MemoryStore{}
			ran := 0
			h := idempotent(store, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
				ran++
				return nil, nil
			}), func(o *lambdakit.IdempotencyOptions) { o.ProcessWithoutKey = true })
			_, err := handle(t, h, lambdakittest.Message(body))
			if ran != 0 || !errors.Is(err, lambdakit.ErrInvalidKey) || errors.Is(err, lambdakit.ErrNoKey) {
				t.Errorf("got %d runs, err %v; want no run and ErrInvalidKey (not ErrNoKey)", ran, err)
			}
		})
	}
	t.Run("a body without the field still runs", func(t *testing.T) {
		ran := 0
		h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			ran++
			return nil, nil
		}), func(o *lambdakit.IdempotencyOptions) { o.ProcessWithoutKey = true })
		if _, err := handle(t, h, lambdakittest.Message(`{"amount":1}`)); err != nil || ran != 1 {
			t.Errorf("got %d runs, err %v; want 1 run, nil", ran, err)
		}
	})
}

// A handler that calls runtime.Goexit (t.FailNow in a helper, for one) must
// not leave later messages with its key waiting in the container, nor its
// lock held until the lease ends.
func TestIdempotentGoexitInHandlerStrandsNothing(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	var mu sync.Mutex
	runs := 0
	entered := make(chan struct{})
	release := make(chan struct{})
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		mu.Lock()
		runs++
		first := runs == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
			runtime.Goexit()
		}
		return []byte(`"ok"`), nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := paymentBody("p-goexit", 1)

	go func() {
		msg := lambdakittest.Message(body)
		_, _ = h.Handle(ctx, &msg)
	}()
	<-entered
	waiter := make(chan error, 1)
	go func() {
		msg := lambdakittest.Message(body)
		_, err := h.Handle(ctx, &msg)
		waiter <- err
	}()
	// Let the second message join the first one's flight before the
	// first exits.
	time.Sleep(50 * time.Millisecond)
	close(release)

	select {
	case err := <-waiter:
		// The first's failure is not the waiter's: it runs on its own.
		if err != nil {
			t.Errorf("waiting message: got %v; want it run on its own after the first exited", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a message with the same key still waits 5 s after the handler called runtime.Goexit")
	}

	done := make(chan error, 1)
	go func() {
		msg := lambdakittest.Message(body)
		_, err := h.Handle(ctx, &msg)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("retry after Goexit: got %v; want the handler run (lock released)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a retry still waits 5 s after the handler called runtime.Goexit")
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
	h := idempotent(&lambdakittest.MemoryStore{}, reuse, func(o *lambdakit.IdempotencyOptions) { o.CacheSize = 10 })
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

// The same payment re-sent by another JSON encoder is the same payload:
// escapes, spacing, key order and number spellings must not matter.
func TestIdempotentPayloadComparesValuesNotText(t *testing.T) {
	same := []struct{ name, first, again string }{
		{"escapes", `{"payment_id":"o<1>","amount":5}`, `{"payment_id":"o\u003c1\u003e","amount":5}`},
		{"key order and spacing", `{"payment_id":"p","amount":1,"currency":"EUR"}`, "{ \"currency\" : \"EUR\",\n \"amount\": 1, \"payment_id\": \"p\" }"},
		{"nested key order", `{"payment_id":"p","card":{"last4":"4242","exp":"12/30"}}`, `{"card":{"exp":"12/30","last4":"4242"},"payment_id":"p"}`},
		{"number spelling", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":1e2}`},
		{"fraction spelling", `{"payment_id":"p","rate":0.5}`, `{"payment_id":"p","rate":5.00E-1}`},
		{"escaped slash and unicode", `{"payment_id":"p","note":"a/b é"}`, `{"payment_id":"p","note":"a\/b \u00e9"}`},
	}
	for _, tc := range same {
		t.Run("same: "+tc.name, func(t *testing.T) {
			fx := &testenv.Counter{}
			h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				fx.Add("p")
				return nil, nil
			}))
			for i, body := range []string{tc.first, tc.again} {
				if _, err := handle(t, h, lambdakittest.Message(body)); err != nil {
					t.Fatalf("message %d (%s): %v", i+1, body, err)
				}
			}
			if n := fx.Count("p"); n != 1 {
				t.Errorf("handler ran %d times; want 1 (the second is a duplicate)", n)
			}
		})
	}
	different := []struct{ name, first, again string }{
		{"other amount", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":101}`},
		{"number versus string", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":"100"}`},
		{"extra field", `{"payment_id":"p","amount":1}`, `{"payment_id":"p","amount":1,"x":null}`},
		{"array order", `{"payment_id":"p","l":[1,2]}`, `{"payment_id":"p","l":[2,1]}`},
	}
	for _, tc := range different {
		t.Run("different: "+tc.name, func(t *testing.T) {
			h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil }))
			if _, err := handle(t, h, lambdakittest.Message(tc.first)); err != nil {
				t.Fatal(err)
			}
			if _, err := handle(t, h, lambdakittest.Message(tc.again)); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
				t.Errorf("got %v; want ErrPayloadMismatch", err)
			}
		})
	}
}

// A numeric key is one key however it is spelled: 1, 1.0, 1e0 and 10e-1
// are the same number, and so the same record.
func TestIdempotentNumericKeySpellingsAreOneKey(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), quiet, func(o *lambdakit.IdempotencyOptions) {
		o.DisableValidation = true
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		fx.Add("1")
		return nil, nil
	}))
	for _, body := range []string{`{"id":1}`, `{"id":1.0}`, `{"id":1e0}`, `{"id":10e-1}`, `{"id":0.1E1}`} {
		if _, err := handle(t, h, lambdakittest.Message(body)); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	if n := fx.Count("1"); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
	if recs := store.Records(); len(recs) != 1 {
		t.Errorf("got %d records; want 1", len(recs))
	}
}

// blockingStore's Complete and Release block until their context ends,
// like a call to a frozen endpoint without a timeout.
type blockingStore struct {
	lambdakittest.MemoryStore
	deadline chan bool // whether the cleanup context had a deadline
}

func (s *blockingStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	_, ok := ctx.Deadline()
	s.deadline <- ok
	<-ctx.Done()
	return ctx.Err()
}

// Cleanup after the handler (Complete, Release) runs on a context that ends
// with the record's lease at the latest, never on one without a deadline:
// a hung call must not hold same-key messages in the container for long.
func TestIdempotentCleanupIsBoundedByTheLease(t *testing.T) {
	store := &blockingStore{deadline: make(chan bool, 4)}
	h := idempotent(store, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		return []byte(`"ok"`), nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		msg := lambdakittest.Message(paymentBody("p-hung", 1))
		_, err := h.Handle(ctx, &msg)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("got nil; want the hung completion's error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Handle still waits on a hung Complete 10 s after a 300 ms invocation deadline")
	}
	if ok := <-store.deadline; !ok {
		t.Error("Complete ran on a context without a deadline")
	}
}

// Both stores must agree, to the millisecond, on when a record stops
// counting; RunStoreContract checks that on each. This checks the
// middleware's side: with a TTL shorter than the invocation, the record
// stays held for the whole lease.
func TestIdempotentShortTTLHoldsTheWholeLease(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// The invocation's deadline must lie ahead of the real clock (stores
	// refuse a context already ended), the test's own clock just before it.
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	now := base.Add(100 * time.Millisecond)
	clock := func() time.Time { return now }
	entered := make(chan struct{})
	gate := make(chan struct{})
	owner := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.IdempotencyOptions) {
		o.TTL = time.Millisecond
		o.Now = clock
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		close(entered)
		<-gate
		return nil, nil
	}))
	ctx, cancel := context.WithDeadline(context.Background(), base.Add(900*time.Millisecond))
	defer cancel()
	ownerErr := make(chan error, 1)
	go func() {
		msg := lambdakittest.Message(paymentBody("p-ttl", 1))
		_, err := owner.Handle(ctx, &msg)
		ownerErr <- err
	}()
	select {
	case <-entered:
	case err := <-ownerErr:
		t.Fatalf("owner ended before its handler ran: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("owner's handler did not start in 5 s")
	}
	defer close(gate)
	for _, at := range []time.Duration{100 * time.Millisecond, 899 * time.Millisecond} {
		other := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.IdempotencyOptions) {
			o.Now = func() time.Time { return base.Add(at) }
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			return nil, fmt.Errorf("second owner ran at +%v while the first held the lease", at)
		}))
		if _, err := handle(t, other, lambdakittest.Message(paymentBody("p-ttl", 1))); !errors.Is(err, lambdakit.ErrInProgress) {
			t.Errorf("at +%v: got %v; want ErrInProgress", at, err)
		}
	}
}
