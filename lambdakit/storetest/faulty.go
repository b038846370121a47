package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/internal/faultdraw"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// ErrInjected is the error FaultyStore returns for the faults it injects.
var ErrInjected = errors.New("storetest: injected fault")

// FaultyStore wraps a Store and fails a fraction of its calls, for chaos
// tests. Half of the faults happen before the call reaches Store (nothing
// changed), half after it (the change was made but its answer is lost, like
// a timeout on a request that went through). Set Rate and Seed before the
// first call; the store is then safe for concurrent use.
//
// It keeps the optional capabilities of Store, as the engine finds them
// (lambdakit.StoreAs), and only those, so that a chaos run takes the path
// production takes: the calls that read or write (Commit, MarkEffect,
// GetRecords) fail as Acquire, Complete and Release do; the checks that
// send nothing (CheckItem, CheckStaging, MaxIDBytes) are Store's own.
type FaultyStore struct {
	Store lambdakit.Store
	// Rate is the fraction of calls that fail, from 0 to 1.
	Rate float64
	// Seed makes the faults repeatable.
	Seed uint64

	once sync.Once
	draw *faultdraw.Draw
	// inner is what Unwrap returns: Store, under a faulty layer for each
	// capability that sends requests, when Store has it.
	inner lambdakit.Store
}

// faultyCommitter is the layer that injects faults into a Committer's
// Commit. Its Store methods are those of the layers below: the engine
// calls the FaultyStore's.
type faultyCommitter struct {
	lambdakit.Store
	s         *FaultyStore
	committer lambdakit.Committer
}

// faultyMarker is the layer that injects faults into an EffectMarker's
// MarkEffect.
type faultyMarker struct {
	lambdakit.Store
	s      *FaultyStore
	marker lambdakit.EffectMarker
}

// faultyGetter is the layer that injects faults into a BatchGetter's
// GetRecords.
type faultyGetter struct {
	lambdakit.Store
	s      *FaultyStore
	getter lambdakit.BatchGetter
}

var (
	_ lambdakit.StoreWrapper = (*FaultyStore)(nil)
	_ lambdakit.Committer    = (*faultyCommitter)(nil)
	_ lambdakit.StoreWrapper = (*faultyCommitter)(nil)
	_ lambdakit.EffectMarker = (*faultyMarker)(nil)
	_ lambdakit.StoreWrapper = (*faultyMarker)(nil)
	_ lambdakit.BatchGetter  = (*faultyGetter)(nil)
	_ lambdakit.StoreWrapper = (*faultyGetter)(nil)
)

// Injected is how many faults the store has injected so far.
func (s *FaultyStore) Injected() int { return s.setup().Injected() }

// setup returns the draw of the store's faults, made from Rate and Seed at
// the first call, with the layers Unwrap returns.
func (s *FaultyStore) setup() *faultdraw.Draw {
	s.once.Do(func() {
		s.draw = faultdraw.New(s.Rate, s.Seed)
		s.inner = s.Store
		if m, ok := lambdakit.StoreAs[lambdakit.EffectMarker](s.Store); ok {
			s.inner = &faultyMarker{Store: s.inner, s: s, marker: m}
		}
		if c, ok := lambdakit.StoreAs[lambdakit.Committer](s.Store); ok {
			s.inner = &faultyCommitter{Store: s.inner, s: s, committer: c}
		}
		if g, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s.Store); ok {
			s.inner = &faultyGetter{Store: s.inner, s: s, getter: g}
		}
	})
	return s.draw
}

// Unwrap implements lambdakit.StoreWrapper.
func (s *FaultyStore) Unwrap() lambdakit.Store {
	s.setup()
	return s.inner
}

// Unwrap implements lambdakit.StoreWrapper.
func (l *faultyCommitter) Unwrap() lambdakit.Store { return l.Store }

// Unwrap implements lambdakit.StoreWrapper.
func (l *faultyMarker) Unwrap() lambdakit.Store { return l.Store }

// Unwrap implements lambdakit.StoreWrapper.
func (l *faultyGetter) Unwrap() lambdakit.Store { return l.Store }

// inject runs call unless a fault drawn for it comes before, and loses
// its answer when the fault comes after.
func (s *FaultyStore) inject(call func() error) error {
	before, after := s.setup().Next()
	if before {
		return ErrInjected
	}
	if err := call(); err != nil || !after {
		return err
	}
	return ErrInjected
}

// Acquire implements lambdakit.Store.
func (s *FaultyStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	return s.claim(ctx, s.Store.Acquire, rec, now)
}

// claim is inject for the calls that take a record or find the one that
// holds its ID (Acquire, Commit).
func (s *FaultyStore) claim(ctx context.Context, call func(context.Context, lambdakit.IdempotencyRecord, time.Time) (lambdakit.IdempotencyRecord, bool, error),
	rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	var old lambdakit.IdempotencyRecord
	var ok bool
	err := s.inject(func() (err error) {
		old, ok, err = call(ctx, rec, now)
		return err
	})
	if errors.Is(err, ErrInjected) {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	return old, ok, err
}

// Complete implements lambdakit.Store.
func (s *FaultyStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	return s.inject(func() error { return s.Store.Complete(ctx, rec) })
}

// Release implements lambdakit.Store.
func (s *FaultyStore) Release(ctx context.Context, id, lease string) error {
	return s.inject(func() error { return s.Store.Release(ctx, id, lease) })
}

// Commit implements lambdakit.Committer.
func (l *faultyCommitter) Commit(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	return l.s.claim(ctx, l.committer.Commit, rec, now)
}

// MarkEffect implements lambdakit.EffectMarker.
func (l *faultyMarker) MarkEffect(ctx context.Context, id, lease, effect string) error {
	return l.s.inject(func() error { return l.marker.MarkEffect(ctx, id, lease, effect) })
}

// GetRecords implements lambdakit.BatchGetter.
func (l *faultyGetter) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	var recs map[string]lambdakit.IdempotencyRecord
	err := l.s.inject(func() (err error) {
		recs, err = l.getter.GetRecords(ctx, ids)
		return err
	})
	if errors.Is(err, ErrInjected) {
		return nil, err
	}
	return recs, err
}
