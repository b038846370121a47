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
type FaultyStore struct {
	Store lambdakit.Store
	// Rate is the fraction of calls that fail, from 0 to 1.
	Rate float64
	// Seed makes the faults repeatable.
	Seed uint64

	once sync.Once
	draw *faultdraw.Draw
}

var _ lambdakit.Store = (*FaultyStore)(nil)

// Injected is how many faults the store has injected so far.
func (s *FaultyStore) Injected() int { return s.faults().Injected() }

// faults returns the draw of the store's faults, made from Rate and Seed at
// the first call.
func (s *FaultyStore) faults() *faultdraw.Draw {
	s.once.Do(func() { s.draw = faultdraw.New(s.Rate, s.Seed) })
	return s.draw
}

// fault draws whether this call fails, and if so whether before or after.
func (s *FaultyStore) fault() (before, after bool) { return s.faults().Next() }

// Acquire implements lambdakit.Store.
func (s *FaultyStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	before, after := s.fault()
	if before {
		return lambdakit.IdempotencyRecord{}, false, ErrInjected
	}
	old, ok, err := s.Store.Acquire(ctx, rec, now)
	if after && err == nil {
		return lambdakit.IdempotencyRecord{}, false, ErrInjected
	}
	return old, ok, err
}

// Complete implements lambdakit.Store.
func (s *FaultyStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	before, after := s.fault()
	if before {
		return ErrInjected
	}
	if err := s.Store.Complete(ctx, rec); err != nil || !after {
		return err
	}
	return ErrInjected
}

// Release implements lambdakit.Store.
func (s *FaultyStore) Release(ctx context.Context, id, lease string) error {
	before, after := s.fault()
	if before {
		return ErrInjected
	}
	if err := s.Store.Release(ctx, id, lease); err != nil || !after {
		return err
	}
	return ErrInjected
}
