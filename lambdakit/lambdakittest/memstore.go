package lambdakittest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// MemoryStore is a lambdakit.Store in memory. The zero value is ready to use
// and it is safe for concurrent use. It keeps times at the precision
// DynamoDB does (see lambdakit.IdempotencyRecord.Rounded), so that it agrees with
// dynamostore, to the millisecond, on when a record stops counting. Staged writes must be of type func():
// they run under the store's lock, right after the completion, and only if
// the completion succeeds. A handler's item (lambdakit.SetItem) must be a
// map[string]any; Item returns what was written.
type MemoryStore struct {
	mu    sync.Mutex
	recs  map[string]lambdakit.IdempotencyRecord
	items map[string]map[string]any // the handlers' items, by record ID
	calls Calls
}

// Calls counts the requests a Store received, per method.
type Calls struct {
	Acquire, Complete, Release, GetRecords, Commit int
}

// Total is the number of requests of every kind.
func (c Calls) Total() int { return c.Acquire + c.Complete + c.Release + c.GetRecords + c.Commit }

var (
	_ lambdakit.Store        = (*MemoryStore)(nil)
	_ lambdakit.BatchGetter  = (*MemoryStore)(nil)
	_ lambdakit.ItemStore    = (*MemoryStore)(nil)
	_ lambdakit.Committer    = (*MemoryStore)(nil)
	_ lambdakit.EffectMarker = (*MemoryStore)(nil)
)

// recordAttrs are the names a record's item uses in dynamostore by
// default. MemoryStore refuses them in a handler's item, as dynamostore
// does, so that a test on it finds the clash a deployment would.
var recordAttrs = []string{"id", "status", "expiration", "in_progress_expiration", "validation", "data", "lease", "failure", "effect"}

// CheckItem implements lambdakit.ItemStore: item must be a non-empty
// map[string]any whose names are not empty and are not the attributes of
// a record's item in dynamostore's default names ("id", "status", ...).
func (s *MemoryStore) CheckItem(item any) error {
	m, ok := item.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: MemoryStore writes an item of type map[string]any, got %T", lambdakit.ErrInvalidItem, item)
	}
	if len(m) == 0 {
		return fmt.Errorf("%w: the item has no attributes", lambdakit.ErrInvalidItem)
	}
	for name := range m {
		switch {
		case name == "":
			return fmt.Errorf("%w: an attribute with an empty name", lambdakit.ErrInvalidItem)
		case slices.Contains(recordAttrs, name):
			return fmt.Errorf("%w: attribute %q is the record's own; name it otherwise", lambdakit.ErrInvalidItem, name)
		}
	}
	return nil
}

// Item returns a copy of the handler's item written on record id, and
// false when there is none.
func (s *MemoryStore) Item(id string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.items[id]
	return maps.Clone(m), ok
}

// Commit implements lambdakit.Committer.
func (s *MemoryStore) Commit(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	ops, item, err := s.writes(rec)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Commit++
	if old, ok := s.recs[rec.ID]; ok && holds(old, now) {
		return clone(old), false, nil
	}
	if s.recs == nil {
		s.recs = make(map[string]lambdakit.IdempotencyRecord)
	}
	rec = clone(rec.Rounded())
	if len(rec.Data) == 0 {
		rec.Data = nil // an empty result is no result, as in Complete
	}
	s.recs[rec.ID] = rec
	delete(s.items, rec.ID) // replaced whole, as in Acquire
	s.setItem(rec.ID, item)
	for _, op := range ops {
		op()
	}
	return lambdakit.IdempotencyRecord{}, true, nil
}

// writes checks what a completion of rec writes besides the record: its
// staged writes, and its item.
func (s *MemoryStore) writes(rec lambdakit.IdempotencyRecord) ([]func(), map[string]any, error) {
	ops := make([]func(), len(rec.Staged))
	for i, op := range rec.Staged {
		fn, ok := op.(func())
		if !ok {
			return nil, nil, fmt.Errorf("%w: MemoryStore stages func(), got %T", lambdakit.ErrStagingUnsupported, op)
		}
		ops[i] = fn
	}
	if rec.Item == nil {
		return ops, nil, nil
	}
	if err := s.CheckItem(rec.Item); err != nil {
		return nil, nil, err
	}
	return ops, maps.Clone(rec.Item.(map[string]any)), nil
}

// setItem keeps the item written on record id; nil writes none.
func (s *MemoryStore) setItem(id string, item map[string]any) {
	if item == nil {
		return
	}
	if s.items == nil {
		s.items = make(map[string]map[string]any)
	}
	s.items[id] = item
}

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
	if old, ok := s.recs[rec.ID]; ok && holds(old, now) {
		return clone(old), false, nil
	}
	if s.recs == nil {
		s.recs = make(map[string]lambdakit.IdempotencyRecord)
	}
	s.recs[rec.ID] = clone(rec.Rounded())
	// The put replaces the whole item, as DynamoDB's does: an expired
	// record's item goes with it.
	delete(s.items, rec.ID)
	return lambdakit.IdempotencyRecord{}, true, nil
}

// holds reports whether old keeps a new record from its ID at now: it is
// live, or it is no record the engine knows, which no store replaces.
func holds(old lambdakit.IdempotencyRecord, now time.Time) bool {
	return old.Live(now) || !old.Status.Known()
}

// Put stores rec as it is, with no condition: for a test that needs a
// record as something other than the engine left it (another runtime's,
// an operator's edit, a status the engine does not know). It replaces any
// record and item under rec.ID.
func (s *MemoryStore) Put(rec lambdakit.IdempotencyRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = make(map[string]lambdakit.IdempotencyRecord)
	}
	s.recs[rec.ID] = clone(rec)
	delete(s.items, rec.ID)
}

// Complete implements lambdakit.Store.
func (s *MemoryStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ops, item, err := s.writes(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Complete++
	old, ok := s.recs[rec.ID]
	if !ok || old.Lease != rec.Lease {
		return fmt.Errorf("complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	}
	if old.Status == lambdakit.StatusCompleted && len(ops) > 0 {
		return nil // completed earlier by this lease: its writes are committed
	}
	old.Status = lambdakit.StatusCompleted
	old.Expiration = rec.Rounded().Expiration
	old.Validation = rec.Validation
	old.Failure = rec.Failure
	old.Effect = rec.Effect
	old.Data = nil // an empty result is no result, as the contract says
	if len(rec.Data) > 0 {
		old.Data = append([]byte(nil), rec.Data...)
	}
	s.recs[rec.ID] = old
	s.setItem(rec.ID, item)
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
	delete(s.items, id)
	return nil
}

// MarkEffect implements lambdakit.EffectMarker. It counts as a completion
// in Calls (a write of the record).
func (s *MemoryStore) MarkEffect(ctx context.Context, id, lease, effect string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Complete++
	old, ok := s.recs[id]
	if !ok || old.Lease != lease || old.Status != lambdakit.StatusInProgress {
		return fmt.Errorf("mark effect %s: %w", id, lambdakit.ErrLeaseLost)
	}
	old.Effect = effect
	s.recs[id] = old
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
	r.Staged, r.Item = nil, nil
	return r
}
