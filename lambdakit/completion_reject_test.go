package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// rejectThenThrottle refuses the first completion for good (as DynamoDB
// does an item over 400 KB), and throttles the second, the engine's write
// of the Failure record: a transient error, nothing written. Later calls
// go through.
type rejectThenThrottle struct {
	*lambdakittest.MemoryStore
	mu    sync.Mutex
	calls int
}

func (s *rejectThenThrottle) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	switch n {
	case 1:
		return fmt.Errorf("complete %s: %w: item too large", rec.ID, lambdakit.ErrCompletionRejected)
	case 2:
		return fmt.Errorf("complete %s: %w", rec.ID, lambdakit.ErrThrottled)
	}
	return s.MemoryStore.Complete(ctx, rec)
}

// When the completion is rejected and the write of the Failure record then
// fails transiently, the write is tried again within the lease: left
// undone, the next delivery (after the visibility timeout, longer than the
// lease) or a redrive from the DLQ would find the key free and run the work
// a second time.
func TestRejectedCompletionWhoseFailureWriteFailsOnceRunsTheWorkOnce(t *testing.T) {
	store := &rejectThenThrottle{MemoryStore: &lambdakittest.MemoryStore{}}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx))
	msg := lambdakittest.Message(paymentBody("p1", 100))

	const lease = 300 * time.Millisecond // the function timeout
	ctx, cancel := context.WithTimeout(context.Background(), lease)
	_, err := h.Handle(ctx, &msg)
	cancel()
	if !errors.Is(err, lambdakit.ErrPermanent) {
		t.Fatalf("first delivery: got %v; want a permanent failure (the reject path)", err)
	}
	// The next delivery: after the visibility timeout, or a DLQ redrive.
	time.Sleep(2 * lease)
	second, err := handle(t, h, lambdakittest.Redelivery(msg))
	if n := fx.Count("p1"); n != 1 {
		t.Errorf("got %d charges (second delivery: %q, %v); want 1: the first delivery charged and was failed permanently as 'work not run again'", n, second, err)
	}
}
