package lambdakittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// ErrCrashed is what a CrashStore answers a crashed process that asks to
// start work (an Acquire): a dead process starts nothing.
var ErrCrashed = errors.New("lambdakittest: the process crashed")

// CrashStore wraps a Store to play a process that dies in the middle of a
// message: killed by its timeout, out of memory, its container gone. The
// handler's effect may have happened, but the engine's last words never
// reach the store: the record stays in progress, locked, until its lease
// ends, and then the redelivery takes it over.
//
// Before the crash every request goes through to the wrapped store. After
// it, what the process sends to finish its work is lost: Complete, Release
// and MarkEffect change nothing and answer nil, as if sent by a process
// that is no longer there to read the answer; and Acquire fails with
// ErrCrashed. So the first invocation's response means nothing (the process
// that would have sent it is dead), and the engine that ran it must not be
// used again: its warm cache believes the record completed. Run the
// redelivery with a new handler (a new container) over the wrapped store,
// on a clock moved past the lease (Clock).
//
// It passes on the wrapped store's GetRecords (BatchGetter), CheckItem
// (ItemStore) and CheckStaging (StagingChecker), found as the engine finds
// them (lambdakit.StoreAs: below a wrapper such as lambdakitotel.WrapStore
// too), and reads nothing ahead, refuses every item, and checks no size
// where the wrapped store lacks them. It is no Committer. Its Unwrap
// returns no store below it, which would show the engine a Commit no crash
// stops, but the crash store itself as a bare Store, with the wrapped
// store's MaxIDBytes (IDLimiter) when it has one: a record ID the wrapped
// store refuses fails as the engine starts it, as it would without the
// crash store.
type CrashStore struct {
	store   lambdakit.Store
	crashed atomic.Bool
	// beforeCompletion makes the first completion the crash.
	beforeCompletion atomic.Bool
}

var (
	_ lambdakit.Store          = (*CrashStore)(nil)
	_ lambdakit.BatchGetter    = (*CrashStore)(nil)
	_ lambdakit.ItemStore      = (*CrashStore)(nil)
	_ lambdakit.EffectMarker   = (*CrashStore)(nil)
	_ lambdakit.StagingChecker = (*CrashStore)(nil)
	_ lambdakit.StoreWrapper   = (*CrashStore)(nil)
)

// NewCrashStore wraps store; nothing crashes until Crash or
// CrashBeforeCompletion is called.
func NewCrashStore(store lambdakit.Store) *CrashStore {
	return &CrashStore{store: store}
}

// Crash kills the process now: call it from a test's stand-in for the
// effect (a gateway that charged) to crash at that point of the handler.
// What the handler does afterwards never reaches the store, EffectDone's
// mark under Options.StoreEffect included.
func (s *CrashStore) Crash() { s.crashed.Store(true) }

// CrashBeforeCompletion kills the process once the handler has returned,
// before its completion lands: the handler ran to its end, its EffectDone
// kept in the store under Options.StoreEffect, and the record stays in
// progress.
func (s *CrashStore) CrashBeforeCompletion() { s.beforeCompletion.Store(true) }

// Crashed reports whether the process has crashed.
func (s *CrashStore) Crashed() bool { return s.crashed.Load() }

// Acquire implements lambdakit.Store.
func (s *CrashStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if s.Crashed() {
		return lambdakit.IdempotencyRecord{}, false, ErrCrashed
	}
	return s.store.Acquire(ctx, rec, now)
}

// Complete implements lambdakit.Store.
func (s *CrashStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if s.beforeCompletion.Load() {
		s.Crash()
	}
	if s.Crashed() {
		return nil
	}
	return s.store.Complete(ctx, rec)
}

// Release implements lambdakit.Store.
func (s *CrashStore) Release(ctx context.Context, id, lease string) error {
	if s.Crashed() {
		return nil
	}
	return s.store.Release(ctx, id, lease)
}

// MarkEffect implements lambdakit.EffectMarker.
func (s *CrashStore) MarkEffect(ctx context.Context, id, lease, effect string) error {
	if s.Crashed() {
		return nil
	}
	m, ok := lambdakit.StoreAs[lambdakit.EffectMarker](s.store)
	if !ok {
		return fmt.Errorf("lambdakittest: %T keeps no effect", s.store)
	}
	return m.MarkEffect(ctx, id, lease, effect)
}

// GetRecords implements lambdakit.BatchGetter.
func (s *CrashStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	g, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s.store)
	if !ok {
		return map[string]lambdakit.IdempotencyRecord{}, nil
	}
	return g.GetRecords(ctx, ids)
}

// CheckItem implements lambdakit.ItemStore.
func (s *CrashStore) CheckItem(item any) error {
	is, ok := lambdakit.StoreAs[lambdakit.ItemStore](s.store)
	if !ok {
		return fmt.Errorf("%w: %T writes no item", lambdakit.ErrInvalidItem, s.store)
	}
	return is.CheckItem(item)
}

// CheckStaging implements lambdakit.StagingChecker: CheckItem of
// rec.Item, which a StagingChecker that is an ItemStore makes (SetItem
// leaves it to CheckStaging), and then the store's own check, if it has
// one. The store's check alone would not do: it may check no item (one
// that writes none, such as valkeystore's), or check it by other rules
// than the ItemStore above it.
func (s *CrashStore) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	if rec.Item != nil {
		if err := s.CheckItem(rec.Item); err != nil {
			return err
		}
	}
	if c, ok := lambdakit.StoreAs[lambdakit.StagingChecker](s.store); ok {
		return c.CheckStaging(rec)
	}
	return nil
}

// limitedStore is a Store with the IDLimiter of another.
type limitedStore struct {
	lambdakit.Store
	lambdakit.IDLimiter
}

// Unwrap implements lambdakit.StoreWrapper: see CrashStore.
func (s *CrashStore) Unwrap() lambdakit.Store {
	bare := struct{ lambdakit.Store }{s}
	if l, ok := lambdakit.StoreAs[lambdakit.IDLimiter](s.store); ok {
		return limitedStore{bare, l}
	}
	return bare
}

// Clock is a clock the test moves, for Options.Now: pass its Now method.
// It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward: past a lease, to let a redelivery
// take over the record of a crashed process.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
