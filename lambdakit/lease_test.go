package lambdakit_test

import (
	"context"
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
)

func TestIdempotentWarmCacheAnswersDuplicatesWithoutRequests(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx), func(o *lambdakit.IdempotencyOptions) { o.CacheSize = 2 })
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

// ledger is what single-phase handlers write: one row per payment.
type ledger struct {
	mu   sync.Mutex
	rows map[string]int
}

func (l *ledger) write(id string) func() {
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.rows == nil {
			l.rows = map[string]int{}
		}
		l.rows[id]++
	}
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rows[id]
}

func TestIdempotentStagedWritesCommitWithCompletion(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	book := &ledger{}
	fail := true
	h := idempotent(store, lambdakit.Typed(func(ctx context.Context, p payment) error {
		if err := lambdakit.Stage(ctx, book.write(p.PaymentID)); err != nil {
			return err
		}
		if fail {
			return errors.New("failed after staging")
		}
		return nil
	}))
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := handle(t, h, msg); err == nil {
		t.Fatal("got success; want the handler's error")
	}
	if n := book.count("p1"); n != 0 {
		t.Errorf("got %d ledger rows after a failed handler; want its staged write dropped", n)
	}
	fail = false
	for range 3 {
		if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if n := book.count("p1"); n != 1 {
		t.Errorf("got %d ledger rows; want 1", n)
	}
}

func TestStageOutsideIdempotentHandler(t *testing.T) {
	if err := lambdakit.Stage(context.Background(), func() {}); !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("got %v; want ErrNotStaging", err)
	}
}

// limitedStore refuses to keep results larger than max bytes, as DynamoDB
// refuses items over 400 KB.
type limitedStore struct {
	*lambdakittest.MemoryStore
	max int
}

func (s limitedStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if len(rec.Data) > s.max {
		return fmt.Errorf("%d bytes: %w", len(rec.Data), lambdakit.ErrResultNotStorable)
	}
	return s.MemoryStore.Complete(ctx, rec)
}

func TestIdempotentResultTooLargeCompletesWithoutResult(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx)) // result "ch_p-long" is 11 bytes
	msg := lambdakittest.Message(paymentBody("p-long", 1))
	got, err := handle(t, h, msg)
	if err != nil || string(got) != `"ch_p-long"` {
		t.Fatalf("first: got %s, %v; want the result and success", got, err)
	}
	got, err = handle(t, h, lambdakittest.Redelivery(msg))
	if err != nil || got != nil {
		t.Errorf("duplicate: got %s, %v; want success with no cached result", got, err)
	}
	if c := fx.Count("p-long"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
	for _, rec := range store.Records() {
		if rec.Status != lambdakit.StatusCompleted {
			t.Errorf("got status %s; want the record completed, not left in progress", rec.Status)
		}
	}
}

// stealingStore lets another owner take every record over between Acquire
// and Complete, as happens when a handler outlives its lease.
type stealingStore struct{ *lambdakittest.MemoryStore }

func (s stealingStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	rec.Lease = "thief"
	if err := s.MemoryStore.Release(ctx, rec.ID, rec.Lease); err != nil && !errors.Is(err, lambdakit.ErrLeaseLost) {
		return err
	}
	return s.MemoryStore.Complete(ctx, lambdakit.IdempotencyRecord{ID: rec.ID, Lease: "not-the-owner"})
}

// A lost lease is one record failure, logged once: the batch's failure line
// carries the LeaseLost metric, and the middleware logs nothing of its own.
func TestIdempotentLostLeaseFailsAndLogsOnce(t *testing.T) {
	var logs lambdakittest.LogBuffer
	idem := lambdakit.Idempotent(stealingStore{&lambdakittest.MemoryStore{}}, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.IdempotencyOptions) { o.Logger = logs.Logger(); o.Prefix = "pay" })
	var got error
	record := lambdakit.Middleware(func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			out, err := next.Handle(ctx, msg)
			got = err
			return out, err
		})
	})
	batch := lambdakit.Batch(lambdakit.Chain(charger(&testenv.Counter{}), record, idem), func(o *lambdakit.BatchOptions) {
		o.Logger = logs.Logger()
		o.AllowAllFailed = true
	})
	msg := lambdakittest.Message(paymentBody("p1", 1))
	resp, err := batch(t.Context(), lambdakittest.Event(msg))
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != msg.MessageId {
		t.Fatalf("got %+v, %v; want the record reported failed", resp, err)
	}
	lost := (*lambdakit.LeaseLostError)(nil)
	if !errors.As(got, &lost) || !errors.Is(got, lambdakit.ErrLeaseLost) || lost.Op != "complete" || lost.Prefix != "pay" {
		t.Fatalf("got handler error %#v; want a *LeaseLostError on complete wrapping ErrLeaseLost", got)
	}
	lines := logs.Lines(t)
	if len(lines) != 1 || lines[0]["msg"] != "record failed" || lines[0]["level"] != "ERROR" || lines[0]["messageId"] != msg.MessageId {
		t.Fatalf("got log lines %v; want exactly one ERROR line, the record's failure", lines)
	}
	// The line is a CloudWatch metric in the Embedded Metric Format.
	emf, _ := json.Marshal(lines[0]["_aws"])
	var metric struct {
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	}
	if err := json.Unmarshal(emf, &metric); err != nil || len(metric.CloudWatchMetrics) != 1 ||
		metric.CloudWatchMetrics[0].Namespace != "lambdakit" || metric.CloudWatchMetrics[0].Metrics[0].Name != "LeaseLost" ||
		lines[0]["LeaseLost"] != float64(1) || lines[0]["prefix"] != "pay" {
		t.Errorf("got _aws %s and line %v; want an EMF LeaseLost count by prefix", emf, lines[0])
	}
}

// A record that waited in this container for one whose lease was lost
// fails too, with the same error; the lost lease is counted once.
func TestIdempotentLostLeaseIsCountedOncePerLease(t *testing.T) {
	var logs lambdakittest.LogBuffer
	idem := lambdakit.Idempotent(stealingStore{&lambdakittest.MemoryStore{}}, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.IdempotencyOptions) { o.Logger = logs.Logger() })
	entered := make(chan struct{}, 2)
	enter := lambdakit.Middleware(func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			entered <- struct{}{}
			return next.Handle(ctx, msg)
		})
	})
	// The first record's handler waits until both records have entered
	// the middleware, so that the second waits on the first.
	slow := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		for range 2 {
			select {
			case <-entered:
			case <-time.After(5 * time.Second):
				return nil, errors.New("the records did not both start")
			}
		}
		time.Sleep(50 * time.Millisecond) // for the second to reach the wait
		return nil, nil
	})
	batch := lambdakit.Batch(lambdakit.Chain(slow, enter, idem), func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger() })
	msgs := []events.SQSMessage{lambdakittest.Message(paymentBody("p1", 1)), lambdakittest.Message(paymentBody("p1", 1))}
	resp, _ := batch(t.Context(), lambdakittest.Event(msgs...))
	if len(resp.BatchItemFailures) != 2 {
		t.Fatalf("got %+v; want both records failed", resp)
	}
	metrics := 0
	for _, l := range logs.Lines(t) {
		if l["LeaseLost"] != nil {
			metrics++
		}
	}
	if metrics != 1 {
		t.Errorf("got %d lines with the LeaseLost metric; want 1:\n%s", metrics, logs.String())
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
			store := &lambdakittest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 0.2, Seed: seed}
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
				containers[i] = lambdakit.Batch(idempotent(store, handler, func(o *lambdakit.IdempotencyOptions) {
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

// retryingStore answers every Acquire as a client whose first request went
// through but whose answer was lost, so that it asked again.
type retryingStore struct{ *lambdakittest.MemoryStore }

func (s retryingStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if _, _, err := s.MemoryStore.Acquire(ctx, rec, now); err != nil {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	return s.MemoryStore.Acquire(ctx, rec, now)
}

func TestIdempotentRetriedAcquireKeepsTheLock(t *testing.T) {
	fx := &testenv.Counter{}
	h := idempotent(retryingStore{&lambdakittest.MemoryStore{}}, charger(fx))
	msg := lambdakittest.Message(paymentBody("p1", 1))
	if _, err := handle(t, h, msg); err != nil {
		t.Fatalf("got %v; want the lock recognised as ours", err)
	}
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
		t.Fatal(err)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

// panickyStore panics in its first Acquire (a buggy custom Store, or a
// panic inside an SDK call); later calls go to the memory store.
type panickyStore struct {
	*lambdakittest.MemoryStore
	calls atomic.Int32
}

func (s *panickyStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if s.calls.Add(1) == 1 {
		panic("store exploded")
	}
	return s.MemoryStore.Acquire(ctx, rec, now)
}

// A panic in the store fails the record like any error, and leaves nothing
// behind: a later message with the same key in this container is not left
// waiting for a flight that never ends.
func TestIdempotentStorePanicFailsTheRecordOnly(t *testing.T) {
	store := &panickyStore{MemoryStore: &lambdakittest.MemoryStore{}}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet)(lambdakit.HandlerFunc(
		func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) { return nil, nil }))

	msg := lambdakittest.Message(`{"payment_id":"p1"}`)
	var pe *lambdakit.PanicError
	if _, err := h.Handle(context.Background(), &msg); !errors.As(err, &pe) || pe.Value != "store exploded" {
		t.Fatalf("got %v; want a PanicError from the store", err)
	}

	// The store works again. A redelivery in the same container should reach it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	again := lambdakittest.Redelivery(msg)
	start := time.Now()
	_, err := h.Handle(ctx, &again)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("redelivery blocked %v on a flight stranded by the earlier panic, then failed: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if err != nil {
		t.Fatalf("redelivery: %v", err)
	}
}

// lostAnswerStore takes the lock on Acquire but reports an error, as when
// the put's answer is lost on every attempt.
type lostAnswerStore struct{ *lambdakittest.MemoryStore }

func (s lostAnswerStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if _, _, err := s.MemoryStore.Acquire(ctx, rec, now); err != nil {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	return lambdakit.IdempotencyRecord{}, false, errors.New("answer lost")
}

func TestIdempotentFailedAcquireFreesItsOwnLock(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	msg := lambdakittest.Message(paymentBody("p1", 1))
	if _, err := handle(t, idempotent(lostAnswerStore{mem}, charger(fx)), msg); err == nil {
		t.Fatal("got success; want the acquire error")
	}
	// Another container retries at once: the key must not be held until
	// the first one's lease ends.
	if _, err := handle(t, idempotent(mem, charger(fx)), lambdakittest.Redelivery(msg)); err != nil {
		t.Fatalf("retry: got %v; want the lock freed by the failed acquire", err)
	}
	if c := fx.Count("p1"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

func TestIdempotentRecordOutlivesAShortTTLWhileRunning(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	now := time.Now()
	msg := lambdakittest.Message(paymentBody("p1", 1))
	var during error
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, m *events.SQSMessage) ([]byte, error) {
		// While this runs, another container sees the message 2 s later:
		// past the 1 s TTL, before the 1 min lease ends.
		other := idempotent(store, noop, func(o *lambdakit.IdempotencyOptions) {
			o.TTL = time.Second
			o.Now = func() time.Time { return now.Add(2 * time.Second) }
		})
		_, during = handle(t, other, lambdakittest.Redelivery(msg))
		return nil, nil
	}), func(o *lambdakit.IdempotencyOptions) {
		o.TTL = time.Second
		o.Now = func() time.Time { return now }
	})
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancel()
	if _, err := h.Handle(ctx, &msg); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(during, lambdakit.ErrInProgress) {
		t.Errorf("second container while the first runs: got %v; want ErrInProgress", during)
	}
}
