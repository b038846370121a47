package lambdakit_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Messages with one key in one container: a later one waits for the first
// (the in-container flight) and then replays its result or runs on its own.
// Nothing the first one does (exit, panic, hang past its lease) may leave
// the later one waiting for longer than the first one's lease.

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

// A handler that ignores cancellation keeps running after its batch
// answered (ErrStillRunning). Its record's lease is its invocation deadline
// (so a crashed invocation's lock frees itself at that deadline), and a message with its
// key waits in the container no longer than that lease. A redelivery that
// lands in the same warm container after the deadline must stop waiting on
// the hung handler and go to the store, as any other container would, and
// take the record over; were it to wait with no bound but its own deadline,
// it would fail (reason deadline) on every delivery to this container.
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

// A first call in the container that outlived its lease, and whose key a
// waiter took over, must not complete the record, and must fail. Its
// cleanup context ends with its lease, so it fails with that context's
// error before reaching the store (in another container, fencing would
// refuse it with ErrLeaseLost), as docs/semantics.md says. The
// record holds the waiter's result.
func TestTakenOverOwnerInTheContainerDoesNotComplete(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	lease := 300 * time.Millisecond
	e := lambdakit.NewOnce(store, func(o *lambdakit.Options) {
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
