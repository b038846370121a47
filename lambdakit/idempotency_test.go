package lambdakit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

func TestIdempotentDuplicateSkipsHandlerAndReplaysResult(t *testing.T) {
	for _, times := range []int{2, 10} {
		t.Run(fmt.Sprintf("delivered %d times", times), func(t *testing.T) {
			store := &lambdakittest.MemoryStore{}
			fx := &testenv.Counter{}
			h := idempotent(store, charger(fx))
			msg := lambdakittest.Message(paymentBody("p1", 100))
			for i := range times {
				got, err := handle(t, h, lambdakittest.Redelivery(msg))
				if err != nil {
					t.Fatalf("delivery %d: %v", i+1, err)
				}
				if string(got) != `"ch_p1"` {
					t.Errorf("delivery %d: got result %s; want \"ch_p1\"", i+1, got)
				}
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("got %d charges; want 1", n)
			}
			if got, want := store.Calls(), (lambdakittest.Calls{Acquire: times, Complete: 1}); got != want {
				t.Errorf("got store calls %+v; want %+v", got, want)
			}
		})
	}
}

func TestIdempotentProducerRetryWithNewMessageIDIsDuplicate(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx))
	for range 3 { // each Message has a new messageId, as a producer's resend does
		if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 100))); err != nil {
			t.Fatal(err)
		}
	}
	if n := fx.Count("p1"); n != 1 {
		t.Errorf("got %d charges; want 1", n)
	}
}

func TestIdempotentDifferentKeysAreNotDeduplicated(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx))
	for i := range 5 {
		if _, err := handle(t, h, lambdakittest.Message(paymentBody(fmt.Sprintf("p%d", i), 100))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if n := fx.Count(fmt.Sprintf("p%d", i)); n != 1 {
			t.Errorf("p%d: got %d charges; want 1", i, n)
		}
	}
}

func TestIdempotentSameKeyInOneContainerWaitsInsteadOfFailing(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	release := make(chan struct{})
	h := idempotent(store, lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
		fx.Add(p.PaymentID)
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "ch", nil
	}))
	msg := lambdakittest.Message(paymentBody("p1", 100))
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := handle(t, h, lambdakittest.Redelivery(msg))
			errs <- err
		}()
	}
	// Let the goroutines pile up behind the first, then let it finish.
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("got %v; want every copy to succeed", err)
		}
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentSameKeyInOneContainerReplaysPayloadMismatch(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx))
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
	first := lambdakittest.Message(paymentBody("p1", 100))
	changed := lambdakittest.Message(paymentBody("p1", 999))
	resp, err := batch(context.Background(), lambdakittest.Event(first, changed))
	if err != nil {
		t.Fatal(err)
	}
	// Both run at once; whichever takes the key first wins, the other fails
	// with the mismatch instead of ErrInProgress.
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("got failures %+v; want exactly one", resp.BatchItemFailures)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentConcurrentContainersChargeOnce(t *testing.T) {
	// Ten warm containers (ten middlewares) share one table; the same
	// message reaches all of them at once. Those that find the key in
	// progress fail and are redelivered until everyone succeeds.
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	msg := lambdakittest.Message(paymentBody("p1", 100))
	handlers := make([]lambdakit.Handler, 10)
	for i := range handlers {
		handlers[i] = idempotent(store, charger(fx))
	}
	pending := handlers
	for round := 0; len(pending) > 0; round++ {
		if round == 20 {
			t.Fatalf("%d deliveries still failing after 20 rounds", len(pending))
		}
		var mu sync.Mutex
		var again []lambdakit.Handler
		var wg sync.WaitGroup
		for _, h := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := handle(t, h, lambdakittest.Redelivery(msg))
				if err != nil {
					if !errors.Is(err, lambdakit.ErrInProgress) {
						t.Errorf("got %v; want success or ErrInProgress", err)
					}
					mu.Lock()
					again = append(again, h)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		pending = again
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentHandlerErrorReleasesForRetry(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	fail := true
	h := idempotent(store, lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
		if fail {
			return "", errors.New("gateway unavailable")
		}
		fx.Add(p.PaymentID)
		return "ch", nil
	}))
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := handle(t, h, msg); err == nil || err.Error() != "gateway unavailable" {
		t.Fatalf("first delivery: got %v; want the handler's error", err)
	}
	if n := len(store.Records()); n != 0 {
		t.Errorf("got %d records after a failure; want the lock released", n)
	}
	fail = false
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
		t.Fatalf("duplicate after retry: %v", err)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentPanicReleasesAndFails(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	h := idempotent(store, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		panic("boom")
	}))
	_, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1)))
	var pe *lambdakit.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("got %v; want a PanicError with value and stack", err)
	}
	if n := len(store.Records()); n != 0 {
		t.Errorf("got %d records after a panic; want the lock released", n)
	}
}

func TestIdempotentPayloadMismatchFailsWithoutRunning(t *testing.T) {
	t.Run("whole body by default", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		h := idempotent(store, charger(fx))
		if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 100))); err != nil {
			t.Fatal(err)
		}
		_, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 200)))
		if !errors.Is(err, lambdakit.ErrPayloadMismatch) {
			t.Errorf("got %v; want ErrPayloadMismatch", err)
		}
		if c := fx.Count("p1"); c != 1 {
			t.Errorf("got %d charges; want 1", c)
		}
	})
	t.Run("chosen fields ignore the rest", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		h := idempotent(store, charger(fx), func(o *lambdakit.Options) {
			o.Payload = lambdakit.PayloadFields("amount")
		})
		for _, body := range []string{
			`{"payment_id":"p1","amount":100,"sent_at":"10:00"}`,
			`{"sent_at":"10:05","amount":100,"payment_id":"p1"}`,
		} {
			if _, err := handle(t, h, lambdakittest.Message(body)); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
		}
		_, err := handle(t, h, lambdakittest.Message(`{"payment_id":"p1","amount":101}`))
		if !errors.Is(err, lambdakit.ErrPayloadMismatch) {
			t.Errorf("got %v; want ErrPayloadMismatch", err)
		}
	})
	t.Run("validation off", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		h := idempotent(store, charger(fx), func(o *lambdakit.Options) { o.DisableValidation = true })
		for _, amount := range []int{100, 200} {
			if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", amount))); err != nil {
				t.Fatal(err)
			}
		}
		if c := fx.Count("p1"); c != 1 {
			t.Errorf("got %d charges; want 1", c)
		}
	})
}

func TestIdempotentMissingKey(t *testing.T) {
	t.Run("fails closed by default", func(t *testing.T) {
		ran := false
		h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			ran = true
			return nil, nil
		}))
		_, err := handle(t, h, lambdakittest.Message(`{"amount":1}`))
		if !errors.Is(err, lambdakit.ErrNoKey) || ran {
			t.Errorf("got err %v, ran=%v; want ErrNoKey and the handler not run", err, ran)
		}
	})
	t.Run("runs without idempotency when configured", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		ran := 0
		h := idempotent(store, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			ran++
			return nil, nil
		}), func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
		for range 2 {
			if _, err := handle(t, h, lambdakittest.Message(`{"amount":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		if ran != 2 || store.Calls().Total() != 0 {
			t.Errorf("got %d runs, %d store calls; want 2 runs and no store calls", ran, store.Calls().Total())
		}
	})
}

// recordID is the ID the middleware gives key under prefix, computed here
// independently: "<prefix>#<sha256 hex of key>".
func recordID(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + "#" + hex.EncodeToString(sum[:])
}

func TestIdempotentInProgressElsewhereFailsUntilLeaseEnds(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	now := time.Now()
	deadline := now.Add(time.Minute)
	// Another invocation took the key and crashed: its record stays in
	// progress until its invocation deadline.
	crashed := lambdakit.IdempotencyRecord{
		ID: recordID("payments", "p1"), Status: lambdakit.StatusInProgress,
		Expiration: now.Add(time.Hour), InProgressExpiration: deadline, Lease: "crashed",
	}
	if _, ok, err := store.Acquire(t.Context(), crashed, now); !ok || err != nil {
		t.Fatalf("setup: acquired=%v err=%v", ok, err)
	}

	h := idempotent(store, charger(fx), func(o *lambdakit.Options) {
		o.Prefix = "payments"
		o.Now = func() time.Time { return now }
	})
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := handle(t, h, msg); !errors.Is(err, lambdakit.ErrInProgress) {
		t.Fatalf("before the lease ends: got %v; want ErrInProgress", err)
	}
	if c := fx.Count("p1"); c != 0 {
		t.Fatalf("got %d charges while in progress elsewhere; want 0", c)
	}
	now = deadline.Add(time.Millisecond)
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
		t.Fatalf("after the lease ends: got %v; want the takeover to succeed", err)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentRecordSchema(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	now := time.Now().Truncate(time.Second)
	h := idempotent(store, charger(&testenv.Counter{}), func(o *lambdakit.Options) {
		o.Prefix = "payments"
		o.TTL = 24 * time.Hour
		o.Now = func() time.Time { return now }
	})
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(30*time.Second))
	defer cancel()
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := h.Handle(ctx, &msg); err != nil {
		t.Fatal(err)
	}
	rec, ok := store.Records()[recordID("payments", "p1")]
	if !ok {
		t.Fatalf("got records %v; want one at %s", store.Records(), recordID("payments", "p1"))
	}
	if !rec.Expiration.Equal(now.Add(24*time.Hour)) || !rec.InProgressExpiration.Equal(now.Add(30*time.Second)) {
		t.Errorf("got expiration %v, lease end %v; want now+TTL and the deadline", rec.Expiration, rec.InProgressExpiration)
	}
	payload, err := lambdakit.PayloadBody(&msg)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(payload))
	if rec.Status != lambdakit.StatusCompleted || string(rec.Data) != `"ch_p1"` || rec.Validation != hex.EncodeToString(sum[:]) || rec.Lease == "" {
		t.Errorf("got %+v; want completed with data, body hash and lease", rec)
	}
}

func TestIdempotentPrefixDefaultsToFunctionName(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "payment-fn")
	store := &lambdakittest.MemoryStore{}
	if _, err := handle(t, idempotent(store, charger(&testenv.Counter{})), lambdakittest.Message(paymentBody("p1", 1))); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Records()[recordID("payment-fn", "p1")]; !ok {
		t.Errorf("got records %v; want the function name as prefix", store.Records())
	}
}

func TestIdempotentNilPayloadMeansTheDefault(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	h := idempotent(store, charger(&testenv.Counter{}), func(o *lambdakit.Options) { o.Payload = nil })
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 100))); err != nil {
		t.Fatal(err)
	}
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 200))); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
		t.Errorf("got %v; want ErrPayloadMismatch: a nil Payload validates the whole body", err)
	}
}

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
			}), func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
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
		}), func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
		if _, err := handle(t, h, lambdakittest.Message(`{"amount":1}`)); err != nil || ran != 1 {
			t.Errorf("got %d runs, err %v; want 1 run, nil", ran, err)
		}
	})
}

// ProcessWithoutKey runs without a lock only a message that truly has no
// key. A body whose key field is set and then set again to null (or whose
// parent object is repeated without it or as null) must not read as having
// no key (ErrNoKey): a handler decoding it with encoding/json sees the key,
// since null leaves the earlier string in place and a repeated object is
// merged, and running it without a lock would charge the payment again on
// every delivery. It runs at most once, or fails with ErrInvalidKey.
func TestProcessWithoutKeyRunsMessagesWhoseKeyAStructSees(t *testing.T) {
	bodies := map[string]struct {
		path, body string
	}{
		"key set then null":          {"payment_id", `{"payment_id":"p1","amount":100,"payment_id":null}`},
		"parent repeated without it": {"card.number", `{"card":{"number":"4111"},"amount":100,"card":{}}`},
		"parent repeated as null":    {"card.number", `{"card":{"number":"4111"},"amount":100,"card":null}`},
	}
	for name, c := range bodies {
		t.Run(name, func(t *testing.T) {
			var v nestedPayment
			if err := json.Unmarshal([]byte(c.body), &v); err != nil || v.PaymentID == "" && v.Card.Number == "" {
				t.Fatalf("premise: %s decodes to %+v (err %v); want the key present", c.body, v, err)
			}
			ran := 0
			h := lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField(c.path), quiet,
				func(o *lambdakit.Options) { o.ProcessWithoutKey = true })(
				lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
					ran++
					return nil, nil
				}))
			msg := lambdakittest.Message(c.body)
			for range 2 {
				_, _ = handle(t, h, lambdakittest.Redelivery(msg))
			}
			if ran > 1 {
				t.Errorf("the same message ran %d times without a lock, though a struct decodes its key; want at most once (or ErrInvalidKey)", ran)
			}
		})
	}
}

func TestIdempotentChaosEffectHappensExactlyOnce(t *testing.T) {
	// 40 payments, each sent twice by its producer, delivered by a queue
	// that redelivers every failed record, to several containers at once,
	// over a store that fails 20% of calls (half of them after the change
	// was made) and a handler that fails 20% of the time. The ledger row is
	// staged with the completion (single-phase), so it must be written
	// exactly once per payment, and every message must end up processed.
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			store := &storetest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 0.2, Seed: seed}
			book := &ledger{}
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(seed, 99))
			flaky := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return rng.Float64() < 0.2
			}
			handler := lambdakit.Typed(func(ctx context.Context, p payment) error {
				if flaky() {
					return errors.New("flaky downstream")
				}
				return lambdakit.Stage(ctx, book.write(p.PaymentID))
			})
			// Each round is one visibility timeout later: leases left behind
			// by failed calls (the invocation deadline) have ended by then.
			start := time.Now()
			var clock atomic.Int64
			now := func() time.Time { return start.Add(time.Duration(clock.Load()) * time.Minute) }
			containers := make([]lambdakit.BatchFunc, 3)
			for i := range containers {
				containers[i] = lambdakit.Batch(idempotent(store, handler, func(o *lambdakit.Options) {
					o.CacheSize = 8
					o.Now = now
				}), func(o *lambdakit.BatchOptions) {
					o.Concurrency = 4
					o.Logger = silentLogger()
					o.AllowAllFailed = true
				})
			}

			var queue []events.SQSMessage
			for i := range 40 {
				body := paymentBody(fmt.Sprintf("p%d", i), i+1)
				queue = append(queue, lambdakittest.Message(body), lambdakittest.Message(body))
			}
			rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })

			for round := 0; len(queue) > 0; round++ {
				if round == 200 {
					t.Fatalf("%d messages still unprocessed after 200 rounds", len(queue))
				}
				// Up to 10 records per batch, batches spread over the containers.
				var next []events.SQSMessage
				for start := 0; start < len(queue); start += 10 {
					batch := queue[start:min(start+10, len(queue))]
					ctx, cancel := context.WithDeadline(t.Context(), now().Add(30*time.Second))
					resp, err := containers[(round+start)%len(containers)](ctx, lambdakittest.Event(batch...))
					cancel()
					if err != nil {
						t.Fatalf("batch error: %v", err)
					}
					failed := map[string]bool{}
					for _, f := range resp.BatchItemFailures {
						failed[f.ItemIdentifier] = true
					}
					for _, m := range batch {
						if failed[m.MessageId] {
							next = append(next, lambdakittest.Redelivery(m))
						}
					}
				}
				queue = next
				clock.Add(1)
			}
			for i := range 40 {
				if n := book.count(fmt.Sprintf("p%d", i)); n != 1 {
					t.Errorf("p%d: got %d ledger rows; want exactly 1", i, n)
				}
			}
			if store.Injected() == 0 {
				t.Error("no faults were injected; the test proves nothing")
			}
		})
	}
}

// The SQS middleware answers a duplicate message through the response
// hook, as Do does; the hook's error fails that message.
func TestIdempotentDuplicateGoesThroughResponseHook(t *testing.T) {
	fx := &testenv.Counter{}
	errHook := errors.New("hook refused")
	var fail bool
	h := idempotent(&lambdakittest.MemoryStore{}, charger(fx), func(o *lambdakit.Options) {
		o.ResponseHook = func(_ context.Context, result []byte, _ lambdakit.IdempotencyRecord) ([]byte, error) {
			if fail {
				return nil, errHook
			}
			return append(result, " replayed"...), nil
		}
	})
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if got, err := handle(t, h, msg); err != nil || string(got) != `"ch_p1"` {
		t.Fatalf("first delivery: got %s, %v; want the handler's result", got, err)
	}
	if got, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil || string(got) != `"ch_p1" replayed` {
		t.Errorf("duplicate: got %s, %v; want the hook's result", got, err)
	}
	fail = true
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); !errors.Is(err, errHook) {
		t.Errorf("duplicate with a failing hook: got %v; want the hook's error", err)
	}
	if n := fx.Count("p1"); n != 1 {
		t.Errorf("got %d charges; want 1", n)
	}
}

// A response hook that meets a payload mismatch of its own (a nested
// Once.Do with another payload, say) fails its duplicate message as any
// failure does: the message comes back, and is never sent to the
// dead-letter queue as poison. Only a mismatch of the message's own key
// and payload is poison.
func TestIdempotentResponseHookMismatchIsNoPoison(t *testing.T) {
	fx := &testenv.Counter{}
	audit := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
	h := idempotent(&lambdakittest.MemoryStore{}, charger(fx), func(o *lambdakit.Options) {
		o.ResponseHook = func(ctx context.Context, result []byte, rec lambdakit.IdempotencyRecord) ([]byte, error) {
			// A key the audit log used before with another payload.
			return audit.Do(ctx, "audit-1", []byte(`{"replay":2}`), func(context.Context) ([]byte, error) { return result, nil })
		}
	})
	if _, err := audit.Do(batchCtx(t), "audit-1", []byte(`{"replay":1}`), func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	dlq := &deadLetters{}
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if resp, err := batch(batchCtx(t), lambdakittest.Event(msg)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first delivery: %+v, %v; want it handled", resp, err)
	}
	dup := lambdakittest.Redelivery(msg)
	resp, _ := batch(batchCtx(t), lambdakittest.Event(dup))
	wantFailed(t, resp, dup.MessageId)
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q; want none: the hook's failure is no verdict on the message", got)
	}
	if n := fx.Count("p1"); n != 1 {
		t.Errorf("got %d charges; want 1", n)
	}
}
