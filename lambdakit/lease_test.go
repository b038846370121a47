package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The lock on a key: taking it (an Acquire retried, or failing after it
// took the lock), how long it holds (the lease while the handler runs, the
// TTL once the record is completed), and an owner that loses it.

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
		func(o *lambdakit.Options) { o.Logger = logs.Logger(); o.Prefix = "pay" })
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
	if len(lines) != 1 || lines[0]["msg"] != "message failed" || lines[0]["level"] != "ERROR" || lines[0]["messageId"] != msg.MessageId {
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
		func(o *lambdakit.Options) { o.Logger = logs.Logger() })
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
		other := idempotent(store, noop, func(o *lambdakit.Options) {
			o.TTL = time.Second
			o.Now = func() time.Time { return now.Add(2 * time.Second) }
		})
		_, during = handle(t, other, lambdakittest.Redelivery(msg))
		return nil, nil
	}), func(o *lambdakit.Options) {
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

// The lease is what makes "at most once while the lease is live" safe: in
// Lambda it is the invocation deadline, which is also the handler's
// context's deadline, so a handler that honours its context stops by the
// time another owner may take the record over (an owner outliving its lease is the failure fencing exists for). Without a deadline, Do leases the key for LeaseWithoutDeadline
// ("the lease used when the context has no deadline (outside Lambda)"), and
// fn's context must end with that lease too. Were it the caller's context
// unchanged, another process would take the key over once the lease ended
// and run fn while the first fn, though it honours its context, was still
// running and never told: two owners at once, for every call that outlives
// LeaseWithoutDeadline.
func TestDoWithoutDeadlineEndsFnsContextWithTheLease(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	lease := 300 * time.Millisecond
	opts := func(o *lambdakit.Options) { o.Logger = silentLogger(); o.LeaseWithoutDeadline = lease }
	first, second := lambdakit.NewOnce(store, opts), lambdakit.NewOnce(store, opts) // two processes

	start := time.Now()
	stopped := make(chan time.Duration, 1) // when the first fn saw its context end
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Do(context.Background(), "order-1", nil, func(ctx context.Context) ([]byte, error) {
			select {
			case <-ctx.Done(): // a well-behaved fn: it stops when told
				stopped <- time.Since(start)
				return nil, ctx.Err()
			case <-time.After(3 * time.Second):
				stopped <- -1
				return []byte(`"first"`), nil
			}
		})
		firstDone <- err
	}()

	time.Sleep(lease + 200*time.Millisecond) // the first owner's lease has ended
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var overlap bool
	got, err := second.Do(ctx, "order-1", nil, func(context.Context) ([]byte, error) {
		select {
		case <-stopped:
		default:
			overlap = true // the first fn is still running, never told its lease ended
		}
		return []byte(`"second"`), nil
	})
	if err != nil || string(got) != `"second"` {
		t.Fatalf("second owner after the first's lease ended: got %s, %v; want it to take over", got, err)
	}
	if overlap {
		t.Errorf("the second owner ran while the first owner's fn was still running with a live context, %v after the first lease (%v) ended; want fn's context to end with its lease",
			time.Since(start)-lease, lease)
	}
	select {
	case <-firstDone:
	case <-time.After(5 * time.Second):
		t.Fatal("first Do did not return")
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
	owner := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.Options) {
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
		other := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.Options) {
			o.Now = func() time.Time { return base.Add(at) }
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			return nil, fmt.Errorf("second owner ran at +%v while the first held the lease", at)
		}))
		if _, err := handle(t, other, lambdakittest.Message(paymentBody("p-ttl", 1))); !errors.Is(err, lambdakit.ErrInProgress) {
			t.Errorf("at +%v: got %v; want ErrInProgress", at, err)
		}
	}
}

// TTL is "how long a completed record is remembered": the expiration
// counts from the completion, not from when the lock was taken, or a
// record would be remembered only TTL minus the handler's run time. Here a
// handler runs 14 of Lambda's 15 minutes under a 20-minute TTL; a duplicate
// 10 minutes after the completion, well within the TTL, must be skipped.
// (Powertools too computes the expiry when it saves the result.)
func TestTTLCountsFromCompletion(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	start := time.Now()
	var mu sync.Mutex
	now := start
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	ran := 0
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.Options) {
		o.TTL = 20 * time.Minute
		o.Now = clock
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		ran++
		advance(14 * time.Minute) // a long run, as the clock sees it
		return []byte(`"ch_1"`), nil
	}))
	// Lambda's longest invocation; the test itself takes no real time.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(15*time.Minute))
	defer cancel()
	msg := lambdakittest.Message(paymentBody("p-ttl-complete", 1))
	if _, err := h.Handle(ctx, &msg); err != nil {
		t.Fatal(err)
	}
	advance(10 * time.Minute) // 10 minutes after the completion
	again := lambdakittest.Redelivery(msg)
	if _, err := h.Handle(ctx, &again); err != nil {
		t.Fatal(err)
	}
	if ran != 1 {
		t.Errorf("handler ran %d times; want 1: a duplicate 10 min after completion, with a 20 min TTL, must be skipped", ran)
	}
}
