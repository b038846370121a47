package lambdakit_test

// The engine cleans up whatever way a call ends: runtime.Goexit and panics
// in the handler and in the store, at every step (lock, call, commit or
// unlock), leave the record, the flight, the stage and the contexts
// settled. A store that panics is a store that failed: the key is released
// as after its error. A panic is never finished work, whatever error its
// value wraps. Cleanup lasts as long as the lease, counted on the engine's
// clock.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// hookStore is a MemoryStore whose calls can be intercepted: a hook runs
// before the call reaches the memory store, and may panic, call
// runtime.Goexit or return an error instead (skip reports whether the call
// is answered by the hook). The contexts of the calls are kept.
type hookStore struct {
	*lambdakittest.MemoryStore
	mu        sync.Mutex
	acquire   func(n int) (skip bool, err error)
	complete  func(n int, landed bool) error // after the memory store's answer
	release   func(n int) (skip bool, err error)
	nAcquire  int
	nComplete int
	nRelease  int
	ctxs      map[string][]context.Context
}

func newHookStore() *hookStore {
	return &hookStore{MemoryStore: &lambdakittest.MemoryStore{}, ctxs: map[string][]context.Context{}}
}

func (s *hookStore) note(op string, ctx context.Context) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctxs[op] = append(s.ctxs[op], ctx)
	switch op {
	case "acquire":
		s.nAcquire++
		return s.nAcquire
	case "complete":
		s.nComplete++
		return s.nComplete
	default:
		s.nRelease++
		return s.nRelease
	}
}

func (s *hookStore) contexts(op string) []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]context.Context(nil), s.ctxs[op]...)
}

func (s *hookStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	n := s.note("acquire", ctx)
	if s.acquire != nil {
		if skip, err := s.acquire(n); skip {
			return lambdakit.IdempotencyRecord{}, false, err
		}
	}
	return s.MemoryStore.Acquire(ctx, rec, now)
}

func (s *hookStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	n := s.note("complete", ctx)
	err := s.MemoryStore.Complete(ctx, rec)
	if s.complete != nil {
		return s.complete(n, err == nil)
	}
	return err
}

func (s *hookStore) Release(ctx context.Context, id, lease string) error {
	n := s.note("release", ctx)
	if s.release != nil {
		if skip, err := s.release(n); skip {
			return err
		}
	}
	return s.MemoryStore.Release(ctx, id, lease)
}

// inProgress counts the records still locked.
func inProgress(s *lambdakittest.MemoryStore) int {
	n := 0
	for _, r := range s.Records() {
		if r.Status == lambdakit.StatusInProgress {
			n++
		}
	}
	return n
}

// goDo runs e.Do in a goroutine of its own, which runtime.Goexit may end:
// the channel gets the call's answer, or is closed without one when the
// goroutine exited.
type doAnswer struct {
	out []byte
	err error
}

func goDo(ctx context.Context, e *lambdakit.Once, key string, fn func(context.Context) ([]byte, error)) <-chan doAnswer {
	ch := make(chan doAnswer, 1)
	go func() {
		defer close(ch)
		out, err := e.Do(ctx, key, nil, fn)
		ch <- doAnswer{out, err}
	}()
	return ch
}

// await waits up to d for ch; exited reports that the goroutine ended
// without answering (runtime.Goexit).
func await(t *testing.T, ch <-chan doAnswer, d time.Duration, what string) (a doAnswer, exited bool) {
	t.Helper()
	select {
	case a, ok := <-ch:
		return a, !ok
	case <-time.After(d):
		t.Fatalf("%s: no answer after %v", what, d)
		return doAnswer{}, false
	}
}

// A handler that calls runtime.Goexit under Do, with no deadline on the
// context: its goroutine exits, its lock is released with a cleanup
// context that was alive then and is cancelled afterwards, its own
// context ends, a write staged later fails with ErrNotStaging, and a call
// that waited on its flight runs at once.
func TestEngineGoexitUnderDoSettlesEverything(t *testing.T) {
	for _, withDeadline := range []bool{false, true} {
		name := "no deadline"
		if withDeadline {
			name = "deadline"
		}
		t.Run(name, func(t *testing.T) {
			store := newHookStore()
			var releaseCtxErr atomic.Value
			store.release = func(n int) (bool, error) {
				ctxs := store.contexts("release")
				if err := ctxs[len(ctxs)-1].Err(); err != nil {
					releaseCtxErr.Store(err)
				}
				return false, nil
			}
			e := lambdakit.NewOnce(store, quiet)
			ctx := context.Background()
			if withDeadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			entered := make(chan struct{})
			proceed := make(chan struct{})
			var fctx context.Context
			late := make(chan error, 1)
			leftover := make(chan struct{})
			leader := goDo(ctx, e, "k-goexit", func(ctx context.Context) ([]byte, error) {
				fctx = ctx
				if err := lambdakit.Stage(ctx, func() { t.Error("a write staged before Goexit was committed") }); err != nil {
					t.Errorf("Stage before Goexit: %v", err)
				}
				go func() {
					<-leftover
					late <- lambdakit.Stage(ctx, func() { t.Error("a write staged after Goexit was committed") })
				}()
				close(entered)
				<-proceed
				runtime.Goexit()
				return nil, nil
			})
			<-entered
			var runs atomic.Int32
			waiter := goDo(ctx, e, "k-goexit", func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte(`"second"`), nil
			})
			time.Sleep(50 * time.Millisecond) // the waiter joins the flight
			close(proceed)
			if _, exited := await(t, leader, 5*time.Second, "leader"); !exited {
				t.Errorf("leader: Do returned; want its goroutine exited")
			}
			a, exited := await(t, waiter, 5*time.Second, "waiter")
			if exited || a.err != nil || string(a.out) != `"second"` || runs.Load() != 1 {
				t.Errorf("waiter: got %q, %v (exited %v, runs %d); want it run on its own", a.out, a.err, exited, runs.Load())
			}
			if v := releaseCtxErr.Load(); v != nil {
				t.Errorf("release after Goexit had a context already done: %v", v)
			}
			ctxs := store.contexts("release")
			if len(ctxs) == 0 {
				t.Fatalf("no release after Goexit")
			}
			if err := ctxs[0].Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("cleanup context after Goexit: Err() = %v; want it cancelled", err)
			}
			if !withDeadline {
				if err := fctx.Err(); err == nil {
					t.Errorf("handler's context after Goexit: not done; want it ended")
				}
			}
			close(leftover)
			select {
			case err := <-late:
				if !errors.Is(err, lambdakit.ErrNotStaging) {
					t.Errorf("Stage after Goexit: got %v; want ErrNotStaging", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("leftover goroutine did not stage")
			}
		})
	}
}

// A store whose Release panics while the handler's runtime.Goexit unwinds
// the record's goroutine: the process survives, the record fails with
// ErrHandlerExited, the next message of its FIFO group is ErrSkipped, and
// the flight is left: a message with the key runs at once.
func TestEngineReleasePanicsDuringGoexit(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		t.Run(mode, func(t *testing.T) {
			store := newHookStore()
			store.release = func(n int) (bool, error) {
				if n == 1 {
					if mode == "panic" {
						panic("release exploded")
					}
					runtime.Goexit()
				}
				return false, nil
			}
			var runs atomic.Int32
			h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				if runs.Add(1) == 1 {
					runtime.Goexit()
				}
				return []byte(`"ok"`), nil
			}))
			batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			exit := lambdakittest.Message(paymentBody("p-exit", 1), lambdakittest.InGroup("g"))
			after := lambdakittest.Message(paymentBody("p-after", 1), lambdakittest.InGroup("g"))
			done := make(chan struct{})
			var err error
			go func() {
				defer close(done)
				_, err = batch(ctx, lambdakittest.Event(exit, after))
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("batch did not answer")
			}
			var all *lambdakit.AllFailedError
			if !errors.As(err, &all) || len(all.Failures) != 2 {
				t.Fatalf("got %v; want both messages failed", err)
			}
			if e := all.Failures[0].Err; !errors.Is(e, lambdakit.ErrHandlerExited) {
				t.Errorf("message whose handler exited: got %v; want ErrHandlerExited", e)
			}
			if e := all.Failures[1].Err; !errors.Is(e, lambdakit.ErrSkipped) {
				t.Errorf("next of its group: got %v; want ErrSkipped", e)
			}
			if store.nRelease != 1 {
				t.Errorf("%d releases; want the one that failed, not repeated", store.nRelease)
			}
			for _, c := range store.contexts("release") {
				if !errors.Is(c.Err(), context.Canceled) {
					t.Errorf("release's context after the batch: Err() = %v; want it cancelled", c.Err())
				}
			}
			// The flight was left: the key is not stranded in the
			// container. (The lock itself stays until its lease: the
			// release did not happen.)
			msg := lambdakittest.Message(paymentBody("p-exit", 1))
			ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel2()
			if _, err := h.Handle(ctx2, &msg); !errors.Is(err, lambdakit.ErrInProgress) {
				t.Errorf("same key again: got %v; want ErrInProgress from the store, at once", err)
			}
		})
	}
}

// Options.Now is the engine's clock, a public option ("Now is the clock").
// With no deadline on the context, the lease is counted from that clock
// (lockRecord), and the handler's context is given the lease as a duration
// from it (handlerContext); but the cleanup context (cleanupContext) takes
// the lease's end as a wall-clock deadline. With a clock behind the wall
// clock the cleanup context has ended before fn even runs: the work is done
// but never recorded, the call fails, and once the lease ends by the
// engine's clock the next call runs the work again. (docs/semantics.md:
// "Cleanup ... runs ... on a context that ends with the lease"; "An owner
// also sends no completion or release once its lease has ended by its own
// clock".)
func TestEngineClockBehindWallClockStillCompletes(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	lease := 200 * time.Millisecond
	e := lambdakit.NewOnce(store, quiet, func(o *lambdakit.Options) { o.Now = behind; o.LeaseWithoutDeadline = lease })
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`"ok"`), nil
	}
	out, err := e.Do(context.Background(), "k-clock", nil, fn)
	if err != nil || string(out) != `"ok"` {
		t.Errorf("first call: got %q, %v; want the handler's result", out, err)
	}
	for id, r := range store.Records() {
		if r.Status != lambdakit.StatusCompleted {
			t.Errorf("record %s after the first call: %s; want it completed", id, r.Status)
		}
	}
	time.Sleep(lease + 100*time.Millisecond) // the lease has ended, by either clock
	out, err = e.Do(context.Background(), "k-clock", nil, fn)
	if err != nil || string(out) != `"ok"` || runs.Load() != 1 {
		t.Errorf("second call: got %q, %v, and fn ran %d times; want the first result replayed, fn run once", out, err, runs.Load())
	}
}

// A panic is a failure, whatever its value: its staged writes are dropped
// and its lock is released, so that a retry runs. A panic value that is an
// error wrapping ErrResultNotStorable (a handler that panics with an error
// it got from an encoder, say) must not count as "work done, result not
// encodable".
func TestEnginePanicWithResultNotStorableIsAFailure(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(store, quiet)
	var applied atomic.Int32
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		if runs.Add(1) == 1 {
			if err := lambdakit.Stage(ctx, func() { applied.Add(1) }); err != nil {
				t.Errorf("Stage: %v", err)
			}
			panic(fmt.Errorf("encoding the receipt: %w", lambdakit.ErrResultNotStorable))
		}
		return []byte(`"ok"`), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.Do(ctx, "k-panic-value", nil, fn)
	var pe *lambdakit.PanicError
	if !errors.As(err, &pe) {
		t.Errorf("panicking handler: got %v; want a *PanicError", err)
	}
	if n := applied.Load(); n != 0 {
		t.Errorf("the panicking handler's staged write was applied %d times; want it dropped", n)
	}
	out, err := e.Do(ctx, "k-panic-value", nil, fn)
	if err != nil || string(out) != `"ok"` || runs.Load() != 2 {
		t.Errorf("retry: got %q, %v after %d runs; want the handler run again", out, err, runs.Load())
	}
}

// docs/semantics.md, "Failures stay local": "A panic in a handler, a store
// or an IsPermanent fails only its message, and releases the lock." A
// store's Acquire whose put landed but which then panicked (in the SDK's
// answer, say) is an acquire whose answer was lost: the lock must be
// released, as it is when the same acquire returns an error, so that a
// retry runs at once instead of failing with ErrInProgress until the lease
// ends.
func TestEngineAcquirePanicAfterLandingReleasesTheLock(t *testing.T) {
	store := newHookStore()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	panicky := true
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`"ok"`), nil
	}
	e := lambdakit.NewOnce(&acquirePanicStore{hookStore: store, panicAfter: &panicky}, quiet)
	_, err := e.Do(ctx, "k-acquire-panic", nil, fn)
	var pe *lambdakit.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("first call: got %v; want a *PanicError from the store", err)
	}
	panicky = false
	out, err := e.Do(ctx, "k-acquire-panic", nil, fn)
	if err != nil || string(out) != `"ok"` || runs.Load() != 1 {
		t.Errorf("retry after the store's panic: got %q, %v (%d runs); want it run at once, the lock released", out, err, runs.Load())
	}
}

// acquirePanicStore's Acquire reaches the store, and then panics while
// panicAfter is set.
type acquirePanicStore struct {
	*hookStore
	panicAfter *bool
}

func (s *acquirePanicStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	existing, ok, err := s.hookStore.Acquire(ctx, rec, now)
	if *s.panicAfter {
		panic("acquire: answer unreadable")
	}
	return existing, ok, err
}

// The same for a Complete that panics before anything is written: the
// handler's work is not recorded, so the key must be released (as after a
// Complete that fails with an error), and the retry runs at once.
func TestEngineCompletePanicReleasesTheLock(t *testing.T) {
	store := newHookStore()
	wrapped := &completePanicStore{hookStore: store}
	wrapped.panicking.Store(true)
	e := lambdakit.NewOnce(wrapped, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`"ok"`), nil
	}
	_, err := e.Do(ctx, "k-complete-panic", nil, fn)
	var pe *lambdakit.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("first call: got %v; want a *PanicError from the store", err)
	}
	wrapped.panicking.Store(false)
	out, err := e.Do(ctx, "k-complete-panic", nil, fn)
	if err != nil || string(out) != `"ok"` || runs.Load() != 2 {
		t.Errorf("retry after the store's panic: got %q, %v (%d runs); want it run at once, the lock released", out, err, runs.Load())
	}
}

// completePanicStore's Complete panics, without writing, while panicking
// is set.
type completePanicStore struct {
	*hookStore
	panicking atomic.Bool
}

func (s *completePanicStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if s.panicking.Load() {
		panic("complete: SDK bug")
	}
	return s.hookStore.Complete(ctx, rec)
}

// Every way fn can end, with the caller's context cancelled while fn runs
// (the batch's deadline guard): the record is completed, or released
// exactly once, on a cleanup context that was alive when the store got it
// and was cancelled afterwards; nothing stays in progress, and the key runs
// again at once after a failure.
func TestEngineCleanupAfterCancelAtEveryEnd(t *testing.T) {
	for _, end := range []string{"success", "error", "panic", "goexit", "goexit+panic"} {
		t.Run(end, func(t *testing.T) {
			store := newHookStore()
			var liveAtCall atomic.Int32
			var deadAtCall atomic.Int32
			check := func(op string) {
				ctxs := store.contexts(op)
				if ctxs[len(ctxs)-1].Err() == nil {
					liveAtCall.Add(1)
				} else {
					deadAtCall.Add(1)
				}
			}
			store.release = func(int) (bool, error) { check("release"); return false, nil }
			store.complete = func(_ int, landed bool) error {
				check("complete")
				if !landed {
					return errors.New("complete did not land")
				}
				return nil
			}
			e := lambdakit.NewOnce(store, quiet)
			parent, cancelParent := context.WithTimeout(context.Background(), time.Minute)
			defer cancelParent()
			ctx, cancel := context.WithCancel(parent)
			ch := goDo(ctx, e, "k-"+end, func(fctx context.Context) ([]byte, error) {
				cancel() // the deadline guard fires while fn runs
				<-fctx.Done()
				switch end {
				case "error":
					return nil, errors.New("failed")
				case "panic":
					panic("broke")
				case "goexit":
					runtime.Goexit()
				case "goexit+panic":
					defer panic("while exiting")
					runtime.Goexit()
				}
				return []byte(`"ok"`), nil
			})
			a, exited := await(t, ch, 10*time.Second, end)
			wantExit := strings.HasPrefix(end, "goexit")
			if exited != wantExit {
				t.Errorf("goroutine exited: %v; want %v (answer %q, %v)", exited, wantExit, a.out, a.err)
			}
			if end == "success" {
				if a.err != nil {
					t.Errorf("success: got %v", a.err)
				}
				if store.nComplete != 1 || store.nRelease != 0 {
					t.Errorf("calls: %d completes, %d releases; want 1, 0", store.nComplete, store.nRelease)
				}
			} else {
				if store.nComplete != 0 || store.nRelease != 1 {
					t.Errorf("calls: %d completes, %d releases; want 0, 1", store.nComplete, store.nRelease)
				}
				if end == "panic" {
					var pe *lambdakit.PanicError
					if !errors.As(a.err, &pe) || pe.Value != "broke" || !strings.Contains(string(pe.Stack), "cleanup_test.go") {
						t.Errorf("panic: got %v; want a *PanicError with the value and the panicking stack", a.err)
					}
				}
			}
			if n := deadAtCall.Load(); n != 0 {
				t.Errorf("%d cleanup calls got a context already done", n)
			}
			for _, op := range []string{"complete", "release"} {
				for _, c := range store.contexts(op) {
					if !errors.Is(c.Err(), context.Canceled) {
						t.Errorf("%s's context after the call: Err() = %v; want it cancelled", op, c.Err())
					}
				}
			}
			if n := inProgress(store.MemoryStore); n != 0 {
				t.Errorf("%d records in progress; want none", n)
			}
			if end != "success" {
				out, err := e.Do(parent, "k-"+end, nil, func(context.Context) ([]byte, error) { return []byte(`"again"`), nil })
				if err != nil || string(out) != `"again"` {
					t.Errorf("retry: got %q, %v; want it run at once", out, err)
				}
			}
		})
	}
}

// A completion that landed but whose answer was lost fails the call, and
// is no second run: neither for a call that waited on the flight in this
// process, nor for a later call.
func TestEngineLostCompletionAnswerIsNoSecondRun(t *testing.T) {
	store := newHookStore()
	store.complete = func(n int, landed bool) error {
		if n == 1 && landed {
			return errors.New("complete: answer lost")
		}
		return nil
	}
	e := lambdakit.NewOnce(store, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var runs atomic.Int32
	entered, proceed := make(chan struct{}), make(chan struct{})
	leader := goDo(ctx, e, "k-lost-answer", func(context.Context) ([]byte, error) {
		runs.Add(1)
		close(entered)
		<-proceed
		return []byte(`"first"`), nil
	})
	<-entered
	waiter := goDo(ctx, e, "k-lost-answer", func(context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`"second"`), nil
	})
	time.Sleep(50 * time.Millisecond) // the waiter joins the flight
	close(proceed)
	if a, _ := await(t, leader, 5*time.Second, "leader"); a.err == nil {
		t.Errorf("leader: got %q, nil; want the lost answer's error", a.out)
	}
	a, _ := await(t, waiter, 5*time.Second, "waiter")
	if a.err != nil || string(a.out) != `"first"` {
		t.Errorf("waiter: got %q, %v; want the first run's result replayed", a.out, a.err)
	}
	out, err := e.Do(ctx, "k-lost-answer", nil, func(context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`"third"`), nil
	})
	if err != nil || string(out) != `"first"` {
		t.Errorf("later call: got %q, %v; want the first run's result replayed", out, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times; want once", n)
	}
}

// cleanupSeen is what a store's Complete saw of its context while the call
// was on.
type cleanupSeen struct {
	deadline time.Time
	value    any
	err      error
}

type valueKey struct{}

// The cleanup context ends at its record's lease end, which for two calls
// with different deadlines is two different ends, even while both run;
// it carries the call's own values, and outlives the cancellation of the
// call's context (the batch's deadline guard cancels it so that records
// can be cleaned up). Records whose lease ends at one instant share a
// timer, so the test holds two ends at once.
func TestCleanupContextEndsAtEachRecordsLeaseEnd(t *testing.T) {
	store := newHookStore()
	var mu sync.Mutex
	seen := map[string]cleanupSeen{}
	store.complete = func(n int, landed bool) error {
		ctxs := store.contexts("complete")
		ctx := ctxs[n-1]
		d, _ := ctx.Deadline()
		v, _ := ctx.Value(valueKey{}).(string)
		mu.Lock()
		seen[v] = cleanupSeen{deadline: d, value: v, err: ctx.Err()}
		mu.Unlock()
		return nil
	}
	e := lambdakit.NewOnce(store, quiet)
	base := time.Now().Add(time.Minute)
	firstIn := make(chan struct{})
	secondDone := make(chan struct{})
	run := func(name string, deadline time.Time, fn func()) <-chan doAnswer {
		ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), valueKey{}, name), deadline)
		return goDo(ctx, e, "k-"+name, func(context.Context) ([]byte, error) {
			fn()
			cancel() // as the deadline guard does: cleanup must still run
			return []byte(`"ok"`), nil
		})
	}
	first := run("first", base, func() {
		close(firstIn)
		<-secondDone // the first record's lease is held while the second's ends
	})
	<-firstIn
	second := run("second", base.Add(1500*time.Microsecond), func() {})
	if a, _ := await(t, second, 5*time.Second, "second"); a.err != nil {
		t.Errorf("second call: %v", a.err)
	}
	close(secondDone)
	if a, _ := await(t, first, 5*time.Second, "first"); a.err != nil {
		t.Errorf("first call: %v", a.err)
	}
	want := map[string]time.Time{
		"first":  base.Truncate(time.Millisecond).Add(time.Millisecond),
		"second": base.Add(1500 * time.Microsecond).Truncate(time.Millisecond).Add(time.Millisecond),
	}
	for name, end := range want {
		got, ok := seen[name]
		switch {
		case !ok:
			t.Errorf("%s: no completion carried the call's value", name)
		case !got.deadline.Equal(end):
			t.Errorf("%s: cleanup context ends at %v; want its lease end %v", name, got.deadline, end)
		case got.err != nil:
			t.Errorf("%s: cleanup context done during the completion (%v); want it alive after the call's context was cancelled", name, got.err)
		}
	}
}

// Without a deadline on the call's context the lease is counted on the
// engine's clock, and the cleanup context ends that long after the wall
// clock's now: a clock behind the wall clock must not end it at once.
func TestCleanupContextWithoutDeadlineEndsALeaseFromNow(t *testing.T) {
	store := newHookStore()
	var deadline time.Time
	var alive error
	store.complete = func(n int, landed bool) error {
		ctx := store.contexts("complete")[n-1]
		deadline, _ = ctx.Deadline()
		alive = ctx.Err()
		return nil
	}
	lease := time.Minute
	e := lambdakit.NewOnce(store, quiet, func(o *lambdakit.Options) {
		o.Now = func() time.Time { return time.Now().Add(-time.Hour) }
		o.LeaseWithoutDeadline = lease
	})
	before := time.Now()
	if _, err := e.Do(context.Background(), "k-no-deadline", nil, func(context.Context) ([]byte, error) { return []byte(`"ok"`), nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	after := time.Now()
	if deadline.Before(before.Add(lease)) || deadline.After(after.Add(lease+time.Millisecond)) || alive != nil {
		t.Errorf("cleanup context: deadline %v (err %v); want between %v and %v, alive", deadline, alive, before.Add(lease), after.Add(lease+time.Millisecond))
	}
}

// A store derives contexts from the cleanup context (the SDK's attempts,
// dynamostore's per-attempt deadlines). Each must hang on the cleanup
// context as a child does on any context of the context package: a
// context whose cancellation the package cannot see costs a goroutine per
// derived context, for as long as it lives.
func TestCleanupContextStartsNoGoroutinePerDerivedContext(t *testing.T) {
	const derived = 100
	store := newHookStore()
	var created uint64
	store.complete = func(n int, landed bool) error {
		ctx := store.contexts("complete")[n-1]
		before := goroutinesCreated()
		for range derived {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, cancel2 := context.WithCancel(dctx)
			cancel2()
			cancel()
		}
		created = goroutinesCreated() - before
		return nil
	}
	e := lambdakit.NewOnce(store, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Do(ctx, "k-derived", nil, func(context.Context) ([]byte, error) { return []byte(`"ok"`), nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if created >= derived/2 {
		t.Errorf("%d contexts derived from the cleanup context started %d goroutines; want none of their own", derived, created)
	}
}

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
