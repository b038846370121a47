package lambdakittest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// MemoryStore is a lambdakit.Store in memory. The zero value is ready to use
// and it is safe for concurrent use. It keeps times at the precision
// DynamoDB does (see lambdakit.IdempotencyRecord.Rounded), so that it agrees with
// dynamostore, to the millisecond, on when a record stops counting. Staged writes must be of type func():
// they run under the store's lock, right after the completion, and only if
// the completion succeeds.
type MemoryStore struct {
	mu    sync.Mutex
	recs  map[string]lambdakit.IdempotencyRecord
	calls Calls
}

// Calls counts the requests a Store received, per method.
type Calls struct {
	Acquire, Complete, Release, GetRecords int
}

// Total is the number of requests of every kind.
func (c Calls) Total() int { return c.Acquire + c.Complete + c.Release + c.GetRecords }

var (
	_ lambdakit.Store       = (*MemoryStore)(nil)
	_ lambdakit.BatchGetter = (*MemoryStore)(nil)
)

// GetRecords implements lambdakit.BatchGetter.
func (s *MemoryStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.GetRecords++
	out := make(map[string]lambdakit.IdempotencyRecord, len(ids))
	for _, id := range ids {
		if r, ok := s.recs[id]; ok {
			out[id] = clone(r)
		}
	}
	return out, nil
}

// Acquire implements lambdakit.Store.
func (s *MemoryStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Acquire++
	if old, ok := s.recs[rec.ID]; ok && old.Live(now) {
		return clone(old), false, nil
	}
	if s.recs == nil {
		s.recs = make(map[string]lambdakit.IdempotencyRecord)
	}
	rec.Staged = nil
	s.recs[rec.ID] = clone(rec.Rounded())
	return lambdakit.IdempotencyRecord{}, true, nil
}

// Complete implements lambdakit.Store.
func (s *MemoryStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ops := make([]func(), len(rec.Staged))
	for i, op := range rec.Staged {
		fn, ok := op.(func())
		if !ok {
			return fmt.Errorf("%w: MemoryStore stages func(), got %T", lambdakit.ErrStagingUnsupported, op)
		}
		ops[i] = fn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Complete++
	old, ok := s.recs[rec.ID]
	if !ok || old.Lease != rec.Lease {
		return fmt.Errorf("complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	}
	old.Status = lambdakit.StatusCompleted
	old.Expiration = rec.Rounded().Expiration
	old.Validation = rec.Validation
	old.Failure = rec.Failure
	old.Data = nil // an empty result is no result, as the contract says
	if len(rec.Data) > 0 {
		old.Data = append([]byte(nil), rec.Data...)
	}
	s.recs[rec.ID] = old
	for _, op := range ops {
		op()
	}
	return nil
}

// Release implements lambdakit.Store.
func (s *MemoryStore) Release(ctx context.Context, id, lease string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Release++
	old, ok := s.recs[id]
	if !ok {
		return nil // already gone: released
	}
	if old.Lease != lease || old.Status != lambdakit.StatusInProgress {
		return fmt.Errorf("release %s: %w", id, lambdakit.ErrLeaseLost)
	}
	delete(s.recs, id)
	return nil
}

// Calls returns how many requests the store has received so far.
func (s *MemoryStore) Calls() Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Records returns a copy of every record held, live or not, by ID.
func (s *MemoryStore) Records() map[string]lambdakit.IdempotencyRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]lambdakit.IdempotencyRecord, len(s.recs))
	for id, r := range s.recs {
		out[id] = clone(r)
	}
	return out
}

func clone(r lambdakit.IdempotencyRecord) lambdakit.IdempotencyRecord {
	if r.Data != nil {
		r.Data = append([]byte(nil), r.Data...)
	}
	r.Staged = nil
	return r
}
