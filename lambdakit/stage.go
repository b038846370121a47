package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrNotStaging means Stage was called outside a handler run by Idempotent,
// or after that handler returned, where there is no completion to commit
// the writes with.
var ErrNotStaging = errors.New("lambdakit: Stage called outside an idempotent handler")

type stageKey struct{}

// stage collects the writes one handler run stages. Handlers may stage from
// several goroutines, hence the mutex. Once the handler has returned, the
// stage is closed: its writes are committed or dropped, and a later one
// must fail, not vanish.
type stage struct {
	recordID string // the record whose completion commits the writes
	mu       sync.Mutex
	ops      []any
	closed   bool
}

// StagingRecord returns the ID of the idempotency record whose completion
// the writes staged with ctx commit with, and false outside a handler run
// by Idempotent or Once. A write that must be the same item every time
// the handler runs for that record (an outbox message, whose retry must
// not make a second one) derives its key from it.
func StagingRecord(ctx context.Context) (id string, ok bool) {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return "", false
	}
	return s.recordID, true
}

// StageFunc stages, in one step, the writes build returns when given the
// writes the handler has staged so far (read-only; build must not call
// Stage): writes staged from several goroutines see each other, so that a
// write may take its place (len(staged)) as part of its key, or refuse to
// repeat one. An error from build stages nothing and is returned. It fails
// with ErrNotStaging where Stage does.
func StageFunc(ctx context.Context, build func(staged []any) ([]any, error)) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNotStaging
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%w: the handler has returned, and its writes were committed or dropped without these", ErrNotStaging)
	}
	ops, err := build(s.ops[:len(s.ops):len(s.ops)])
	if err != nil {
		return err
	}
	s.ops = append(s.ops, ops...)
	return nil
}

func (s *stage) add(ops []any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.ops = append(s.ops, ops...)
	return true
}

// close closes the stage and returns what was staged.
func (s *stage) close() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := s.ops
	s.ops, s.closed = nil, true
	return ops
}

// Stage hands writes to the Store, to be committed atomically with the
// completion of the current record (single-phase mode): either the record
// is completed and every staged write is applied, or nothing is. What an op
// is depends on the store (dynamostore.Stage stages DynamoDB writes with
// their proper type). If the handler returns an error, its staged writes are
// dropped. Stage fails with ErrNotStaging once the handler has returned (from
// a goroutine it left running, say): the completion has taken the staged
// writes by then, and a write staged later would be lost.
func Stage(ctx context.Context, ops ...any) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNotStaging
	}
	if !s.add(ops) {
		return fmt.Errorf("%w: the handler has returned, and its writes were committed or dropped without these", ErrNotStaging)
	}
	return nil
}
