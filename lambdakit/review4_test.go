package lambdakit_test

// A fourth adversarial review (2026-11-25): each test here failed on the code it was
// written against (615c2b3), and states the behaviour it expects and the
// promise it rests on; the last one pins what the README says since.

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// README ("Semantics"): "A result too large for an item (400 KB) is not
// cached; the record is still completed, so the work is never repeated, and
// duplicates get no result." Run's godoc: "A duplicate whose result could
// not be kept (see ErrResultNotStorable) gets the zero Res." With a warm
// cache (CacheSize), the engine completes the record without the result but
// then puts the full result into the warm cache (idempotency.go, after
// Complete: rec.Data = bytes.Clone(result); cache.put(rec)), so a duplicate
// answered by this container gets the result, one answered by any other
// container (or after eviction) gets none: what a duplicate sees depends on
// which container it lands on, and the "not cached" result is held in
// memory anyway (CacheSize of them, each over 400 KB).
func TestUnstorableResultIsNotReplayedFromTheWarmCache(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx), func(o *lambdakit.IdempotencyOptions) { o.CacheSize = 16 })
	msg := lambdakittest.Message(paymentBody("p-long", 1))
	if got, err := handle(t, h, msg); err != nil || string(got) != `"ch_p-long"` {
		t.Fatalf("first: got %s, %v; want the result and success", got, err)
	}
	// What another container (no warm cache) answers for the duplicate.
	cold := idempotent(store, charger(fx))
	coldGot, err := handle(t, cold, lambdakittest.Redelivery(msg))
	if err != nil || coldGot != nil {
		t.Fatalf("duplicate in another container: got %s, %v; want success with no result", coldGot, err)
	}
	got, err := handle(t, h, lambdakittest.Redelivery(msg))
	if err != nil || got != nil {
		t.Errorf("duplicate in the warm container: got %q, %v; want success with no result, as the store holds (and as another container answers: %q)", got, err, coldGot)
	}
	if c := fx.Count("p-long"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

// Same defect through the singleflight: a message with the key that waited
// in the container for the first one replays the full result, though the
// record holds none and a redelivery elsewhere gets none.
func TestUnstorableResultIsNotReplayedToAWaiter(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	entered := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int32
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if runs.Add(1) == 1 {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return []byte(`"a result longer than 8 bytes"`), nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := paymentBody("p-wait", 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m := lambdakittest.Message(body)
		_, _ = h.Handle(ctx, &m)
	}()
	<-entered
	type res struct {
		out []byte
		err error
	}
	waiter := make(chan res, 1)
	go func() {
		m := lambdakittest.Message(body)
		out, err := h.Handle(ctx, &m)
		waiter <- res{out, err}
	}()
	time.Sleep(100 * time.Millisecond) // let it join the flight
	close(release)
	<-done
	select {
	case r := <-waiter:
		if r.err != nil || r.out != nil {
			t.Errorf("waiter: got %q, %v; want success with no result, as the record holds", r.out, r.err)
		}
	case <-ctx.Done():
		t.Fatal("waiter did not return")
	}
}

// README ("Semantics"): "A handler that calls runtime.Goexit (as t.FailNow
// does) fails its record with ErrHandlerExited and releases the lock, like a
// panic"; ErrHandlerExited's godoc says the same. Under Batch (the way the
// middleware is meant to be run), Batch's per-record goroutine is unwound by
// the Goexit too, so the record's outcome is never set and the answer
// reports it as ErrStillRunning ("still running at the invocation
// deadline", reason code deadline), though the batch was nowhere near its
// deadline and the handler is not running. In a FIFO group the records after
// it are reported ErrNotStarted (deadline) instead of ErrSkipped. The
// record is reported failed, so nothing is lost, but its log line, reason
// code and metrics blame the deadline.
func TestGoexitUnderBatchFailsWithErrHandlerExited(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if msg.Body == paymentBody("p-exit", 1) {
			runtime.Goexit()
		}
		return []byte(`"ok"`), nil
	}))
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit := lambdakittest.Message(paymentBody("p-exit", 1), lambdakittest.InGroup("g"))
	after := lambdakittest.Message(paymentBody("p-after", 1), lambdakittest.InGroup("g"))
	_, err := batch(ctx, lambdakittest.Event(exit, after))
	var all *lambdakit.AllFailedError
	if !errors.As(err, &all) || len(all.Failures) != 2 {
		t.Fatalf("got %v; want both records failed (an *AllFailedError)", err)
	}
	if e := all.Failures[0].Err; !errors.Is(e, lambdakit.ErrHandlerExited) {
		t.Errorf("record that called Goexit: got %v; want ErrHandlerExited", e)
	}
	if e := all.Failures[1].Err; !errors.Is(e, lambdakit.ErrSkipped) {
		t.Errorf("next record of its FIFO group: got %v; want ErrSkipped", e)
	}
	// The lock is released, as the README promises.
	if n := len(store.Records()); n != 0 {
		t.Errorf("%d records left; want the lock released", n)
	}
}

// A handler that ignores cancellation keeps running after its batch
// answered (ErrStillRunning). Its record's lease is its invocation deadline:
// README ("Semantics"): "The lease is the invocation deadline, so a crashed
// invocation's lock frees itself at that deadline"; and the engine's own
// comment on cleanup: "a hung call must not keep later messages with this key
// waiting in the container". Yet a redelivery of the message that lands in
// the same warm container after that deadline joins the hung handler's
// in-container flight and waits on it with no bound but its own deadline, so
// it fails (reason deadline) on every delivery to this container, while the
// store, and every other container, would let it take the record over. The
// waiter should stop waiting when the leader's lease ends and go to the
// store like anyone else.
func TestWaiterDoesNotOutwaitTheLeadersLease(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	calls := make(chan struct{}, 4)
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		calls <- struct{}{}
		if len(calls) == 1 {
			<-hang // ignores cancellation: a call without a timeout
		}
		return []byte(`"ok"`), nil
	}))
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = silentLogger()
		o.AllowAllFailed = true
		o.DeadlineMargin = 200 * time.Millisecond
	})
	msg := lambdakittest.Message(paymentBody("p-hung", 1))

	// Invocation 1: the handler hangs; the batch answers before its deadline.
	ctx1, cancel1 := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel1()
	resp, err := batch(ctx1, lambdakittest.Event(msg))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("invocation 1: got %+v, %v; want the record reported failed (still running)", resp, err)
	}
	<-ctx1.Done()
	time.Sleep(100 * time.Millisecond) // the lease (invocation 1's deadline) has ended

	// Invocation 2, same container, the message redelivered.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	var recErr error
	record := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, m *events.SQSMessage) ([]byte, error) {
		out, err := h.Handle(ctx, m)
		recErr = err
		return out, err
	}), func(o *lambdakit.BatchOptions) { o.Logger = silentLogger(); o.AllowAllFailed = true })
	start := time.Now()
	resp, err = record(ctx2, lambdakittest.Event(lambdakittest.Redelivery(msg)))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("invocation 2, after the first owner's lease ended: got failures %+v (%v: %v) after %v; "+
			"want the record taken over and processed, as the store allows and any other container would",
			resp.BatchItemFailures, err, recErr, time.Since(start).Round(time.Millisecond))
	}
	for id, rec := range store.Records() {
		if rec.Status != lambdakit.StatusCompleted {
			t.Errorf("record %s after invocation 2: %s; want it completed", id, rec.Status)
		}
	}
}

// The lease is what makes "at most once while the lease is live" safe: in
// Lambda it is the invocation deadline, which is also the handler's
// context's deadline, so a handler that honours its context stops by the
// time another owner may take the record over (README "Why fencing
// matters": an owner outliving its lease is the failure fencing exists
// for). Without a deadline, Do leases the key for LeaseWithoutDeadline
// ("the lease used when the context has no deadline (outside Lambda)"), but
// hands fn the caller's context unchanged: it is never cancelled at the
// lease's end. Once the lease ends, another process takes the key over and
// runs fn too, while the first fn, though it honours its context, is still
// running and was never told: two owners at once, for every call that
// outlives LeaseWithoutDeadline. fn's context should end with the lease.
func TestDoWithoutDeadlineEndsFnsContextWithTheLease(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	lease := 300 * time.Millisecond
	opts := func(o *lambdakit.IdempotencyOptions) { o.Logger = silentLogger(); o.LeaseWithoutDeadline = lease }
	first, second := lambdakit.NewIdempotency(store, opts), lambdakit.NewIdempotency(store, opts) // two processes

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

// Found by a fifth review (of 5340cb1), which held the README to its first
// wording: a first call in the container that outlived its lease, and whose
// key a waiter took over, must not complete the record, and must fail. Its
// cleanup context ends with its lease, so it fails with that context's
// error before reaching the store (in another container, fencing would
// refuse it with ErrLeaseLost); the README now says so. This test passes
// on 5340cb1 too: it holds the behaviour the corrected README describes.
func TestTakenOverOwnerInTheContainerDoesNotComplete(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	lease := 300 * time.Millisecond
	e := lambdakit.NewIdempotency(store, func(o *lambdakit.IdempotencyOptions) {
		o.Logger = silentLogger()
		o.LeaseWithoutDeadline = lease
	})
	firstErr := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		_, err := e.Do(context.Background(), "order-5", nil, func(context.Context) ([]byte, error) {
			close(entered)
			time.Sleep(lease + 900*time.Millisecond) // ignores cancellation
			return []byte(`"first"`), nil
		})
		firstErr <- err
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("first fn did not start in 5 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := e.Do(ctx, "order-5", nil, func(context.Context) ([]byte, error) { return []byte(`"second"`), nil })
	if err != nil || string(got) != `"second"` {
		t.Fatalf("waiter after the first's lease: got %s, %v; want it to take the key over", got, err)
	}
	select {
	case err := <-firstErr:
		if err == nil {
			t.Error("first owner, whose lease the waiter took over: got success; want a failure")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first Do did not return in 10 s")
	}
	for id, rec := range store.Records() {
		if rec.Status != lambdakit.StatusCompleted || string(rec.Data) != `"second"` {
			t.Errorf("record %s: %s with %s; want completed with the second owner's result", id, rec.Status, rec.Data)
		}
	}
	if n := len(store.Records()); n != 1 {
		t.Errorf("%d records; want 1", n)
	}
}
