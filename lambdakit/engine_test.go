package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

func engineCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestIdempotencyDo(t *testing.T) {
	storetest.RunIdempotencyChecks(t, func(t *testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} })
}

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

type receipt struct {
	Number int `json:"number"`
}

func TestRunTyped(t *testing.T) {
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
	n := 0
	ship := func(ctx context.Context, o order) (receipt, error) {
		n++
		return receipt{Number: 100 + n}, nil
	}
	for i := range 2 {
		got, err := lambdakit.DoTyped(engineCtx(t), e, "o-1", order{ID: "o-1", Total: 30}, ship)
		if err != nil || got.Number != 101 {
			t.Fatalf("call %d: got %+v, %v; want receipt 101", i+1, got, err)
		}
	}
	if _, err := lambdakit.DoTyped(engineCtx(t), e, "o-1", order{ID: "o-1", Total: 31}, ship); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
		t.Errorf("other order under the key: got %v; want ErrPayloadMismatch", err)
	}
	if n != 1 {
		t.Errorf("ran %d times; want 1", n)
	}
}

// Single-phase staging works through Do as through the middleware.
func TestIdempotencyDoStages(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(store, quiet)
	written := 0
	_, err := e.Do(engineCtx(t), "o-stage", nil, func(ctx context.Context) ([]byte, error) {
		return nil, lambdakit.Stage(ctx, func() { written++ })
	})
	if err != nil || written != 1 {
		t.Errorf("got %v, %d writes; want the staged write committed with the completion", err, written)
	}
}

// hookCalls records the calls of an Options.ResponseHook that marks the
// result it is given, so that a test can tell a replay from a run.
type hookCalls struct {
	mu   sync.Mutex
	recs []lambdakit.IdempotencyRecord
}

func (h *hookCalls) hook(o *lambdakit.Options) {
	o.ResponseHook = func(_ context.Context, result []byte, rec lambdakit.IdempotencyRecord) ([]byte, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.recs = append(h.recs, rec)
		return append(result, " (replayed)"...), nil
	}
}

func (h *hookCalls) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

func TestResponseHookRunsForReplaysOnly(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	var calls hookCalls
	prefix := func(o *lambdakit.Options) { o.Prefix = "orders" }
	e := lambdakit.NewOnce(store, quiet, prefix, calls.hook, func(o *lambdakit.Options) { o.CacheSize = 10 })
	runs := 0
	fn := func(context.Context) ([]byte, error) {
		runs++
		return []byte(`receipt 1`), nil
	}
	got, err := e.Do(engineCtx(t), "o-1", []byte(`{"id":"o-1"}`), fn)
	if err != nil || string(got) != "receipt 1" || calls.count() != 0 {
		t.Fatalf("first call: got %q, %v, %d hook calls; want the handler's result and no hook call", got, err, calls.count())
	}
	// From the warm cache, twice: the hook's change to one replay must not
	// reach the next.
	for i := range 2 {
		got, err = e.Do(engineCtx(t), "o-1", []byte(`{"id":"o-1"}`), fn)
		if err != nil || string(got) != "receipt 1 (replayed)" || calls.count() != i+1 {
			t.Fatalf("duplicate %d: got %q, %v, %d hook calls; want the hook's result, %d calls", i+1, got, err, calls.count(), i+1)
		}
	}
	// From the store, in another container: the hook sees the record as
	// stored.
	other := lambdakit.NewOnce(store, quiet, prefix, calls.hook)
	got, err = other.Do(engineCtx(t), "o-1", []byte(`{"id":"o-1"}`), fn)
	if err != nil || string(got) != "receipt 1 (replayed)" || calls.count() != 3 {
		t.Fatalf("duplicate from the store: got %q, %v, %d hook calls; want the hook's result, 3 calls", got, err, calls.count())
	}
	rec := calls.recs[2]
	if rec.ID != lambdakit.RecordID("orders", "o-1") || rec.Status != lambdakit.StatusCompleted || string(rec.Data) != "receipt 1" || rec.Expiration.IsZero() || rec.Validation == "" {
		t.Errorf("hook's record: got %+v; want the completed record of orders/o-1 with its result, expiration and validation", rec)
	}
	if runs != 1 {
		t.Errorf("handler ran %d times; want 1", runs)
	}
}

func TestResponseHookResultAndErrorAreTheCallers(t *testing.T) {
	errHook := errors.New("hook refused")
	var fail bool
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet, func(o *lambdakit.Options) {
		o.ResponseHook = func(_ context.Context, result []byte, rec lambdakit.IdempotencyRecord) ([]byte, error) {
			if fail {
				return nil, errHook
			}
			return []byte(`{"number":7,"replayed":true}`), nil
		}
	})
	ship := func(context.Context, order) (receipt, error) { return receipt{Number: 1}, nil }
	if _, err := lambdakit.DoTyped(engineCtx(t), e, "o-2", order{ID: "o-2"}, ship); err != nil {
		t.Fatal(err)
	}
	got, err := lambdakit.DoTyped(engineCtx(t), e, "o-2", order{ID: "o-2"}, ship)
	if err != nil || got.Number != 7 {
		t.Errorf("replay: got %+v, %v; want the hook's receipt 7", got, err)
	}
	fail = true
	if _, err := lambdakit.DoTyped(engineCtx(t), e, "o-2", order{ID: "o-2"}, ship); !errors.Is(err, errHook) {
		t.Errorf("replay with a failing hook: got %v; want the hook's error", err)
	}
}

// Calls with one key at the same time in one process: one runs the
// handler, every other replays its result through the hook, whether it
// waited for the first (its flight) or came after (the cache).
func TestResponseHookConcurrentCallers(t *testing.T) {
	const callers = 8
	var calls hookCalls
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet, calls.hook, func(o *lambdakit.Options) { o.CacheSize = 10 })
	started, release := make(chan struct{}, callers), make(chan struct{})
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return []byte(`done`), nil
	}
	results := make(chan string, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			got, err := e.Do(engineCtx(t), "o-3", nil, fn)
			if err != nil {
				got = []byte(err.Error())
			}
			results <- string(got)
		}()
	}
	for range callers {
		<-started
	}
	close(release)
	wg.Wait()
	close(results)
	count := map[string]int{}
	for r := range results {
		count[r]++
	}
	if runs.Load() != 1 || count["done"] != 1 || count["done (replayed)"] != callers-1 || calls.count() != callers-1 {
		t.Errorf("got %d runs, results %v, %d hook calls; want 1 run, 1 result of the handler, %d replayed through the hook", runs.Load(), count, calls.count(), callers-1)
	}
}

// A hook that panics fails its call with a *PanicError, as a handler
// that panics does: the panic must not unwind through Do into the
// function (under lambda.Start it ends the process, and every invocation
// the process runs with it). The record is untouched: the next duplicate
// is replayed.
func TestResponseHookPanicFailsTheCall(t *testing.T) {
	var panics bool
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet, func(o *lambdakit.Options) {
		o.CacheSize = 10
		o.ResponseHook = func(_ context.Context, result []byte, _ lambdakit.IdempotencyRecord) ([]byte, error) {
			if panics {
				panic("hook broke")
			}
			return result, nil
		}
	})
	fn := func(context.Context) ([]byte, error) { return []byte(`done`), nil }
	if _, err := e.Do(engineCtx(t), "o-panic", nil, fn); err != nil {
		t.Fatal(err)
	}
	panics = true
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("Do panicked: %v", p)
			}
		}()
		_, err = e.Do(engineCtx(t), "o-panic", nil, fn)
		return err
	}()
	if pe := (*lambdakit.PanicError)(nil); !errors.As(err, &pe) {
		t.Fatalf("duplicate with a hook that panics: got %v; want a *PanicError", err)
	}
	panics = false
	if got, err := e.Do(engineCtx(t), "o-panic", nil, fn); err != nil || string(got) != "done" {
		t.Errorf("next duplicate: got %q, %v; want the replayed result", got, err)
	}
}

func TestResponseHookNotForInProgressOrFailedRecords(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	var calls hookCalls
	owner := lambdakit.NewOnce(store, quiet)
	other := lambdakit.NewOnce(store, quiet, calls.hook)
	never := func(context.Context) ([]byte, error) {
		t.Error("handler ran")
		return nil, nil
	}

	// In progress in another container.
	running, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := owner.Do(engineCtx(t), "o-busy", nil, func(ctx context.Context) ([]byte, error) {
			close(running)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte(`late`), nil
		})
		done <- err
	}()
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("owner's handler did not start")
	}
	if _, err := other.Do(engineCtx(t), "o-busy", nil, never); !errors.Is(err, lambdakit.ErrInProgress) {
		t.Errorf("key in progress: got %v; want ErrInProgress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Completed with a failure: the work ran, then failed after its
	// effect.
	_, err := owner.Do(engineCtx(t), "o-failed", nil, func(ctx context.Context) ([]byte, error) {
		lambdakit.EffectDone(ctx, "charged")
		return nil, errors.New("receipt not sent")
	})
	if !errors.Is(err, lambdakit.ErrFailedAfterEffect) {
		t.Fatalf("failure after the effect: got %v; want ErrFailedAfterEffect", err)
	}
	if _, err := other.Do(engineCtx(t), "o-failed", nil, never); !errors.Is(err, lambdakit.ErrFailedAfterEffect) {
		t.Errorf("record of a failed run: got %v; want ErrFailedAfterEffect", err)
	}
	if calls.count() != 0 {
		t.Errorf("hook ran %d times; want 0", calls.count())
	}
}

// errAgain is a handler's failure, which releases its key for the next try.
var errAgain = errors.New("try again")

// A call that takes its key, runs and fails (so that the key is free for
// the next, and the in-memory store holds nothing) costs a fixed number of
// allocations: the record ID, the lease, the flight, the stage and its
// context, the cleanup context, and the store's own. Counted exactly by
// testing.AllocsPerRun, it pins the engine's per-record allocations: the
// cleanup context shares its timer with every record of the same lease
// end, and makes no timer of its own.
func TestOnceAllocationsPerCall(t *testing.T) {
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
	ctx := engineCtx(t)
	fn := func(context.Context) ([]byte, error) { return nil, errAgain }
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := e.Do(ctx, "k-allocs", nil, fn); !errors.Is(err, errAgain) {
			t.Fatalf("Do: %v; want the handler's error", err)
		}
	})
	const most = 9
	if allocs > most {
		t.Errorf("a call that takes a key and fails allocates %v times; want at most %d", allocs, most)
	}
}
