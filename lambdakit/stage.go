package lambdakit

import (
	"context"
	"errors"
	"sync"
)

// ErrNotStaging means Stage was called outside a handler run by Idempotent,
// where there is no completion to commit the writes with.
var ErrNotStaging = errors.New("lambdakit: Stage called outside an idempotent handler")

type stageKey struct{}

// stage collects the writes one handler run stages. Handlers may stage from
// several goroutines, hence the mutex.
type stage struct {
	mu  sync.Mutex
	ops []any
}

func (s *stage) add(ops []any) {
	s.mu.Lock()
	s.ops = append(s.ops, ops...)
	s.mu.Unlock()
}

func (s *stage) take() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := s.ops
	s.ops = nil
	return ops
}

// Stage hands writes to the Store, to be committed atomically with the
// completion of the current record (single-phase mode): either the record
// is completed and every staged write is applied, or nothing is. What an op
// is depends on the store (dynamostore.Stage stages DynamoDB writes with
// their proper type). If the handler returns an error, its staged writes are
// dropped.
func Stage(ctx context.Context, ops ...any) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNotStaging
	}
	s.add(ops)
	return nil
}
