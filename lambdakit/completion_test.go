package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// What happens after the handler's side effect: a completion that can
// never succeed, a result that cannot be encoded, a write staged too late
// and a release whose answer was lost must none of them run the work again.
// Writes staged in time commit with the completion; a result too large for
// the store completes the record without it, and is replayed to nobody.

// stagesUnsupported charges (counted) and then stages a write the memory
// store cannot commit, so that every completion of it is refused.
func stagesUnsupported(fx *testenv.Counter) lambdakit.Handler {
	return lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
		fx.Add(p.PaymentID)
		if err := lambdakit.Stage(ctx, "not a write the memory store takes"); err != nil {
			return "", err
		}
		return "ch_" + p.PaymentID, nil
	})
}

func TestCompletionThatCanNeverSucceedDoesNotRepeatTheWork(t *testing.T) {
	for _, times := range []int{2, 10} {
		t.Run(fmt.Sprintf("delivered %d times", times), func(t *testing.T) {
			store := &lambdakittest.MemoryStore{}
			fx := &testenv.Counter{}
			h := idempotent(store, stagesUnsupported(fx))
			msg := lambdakittest.Message(paymentBody("p1", 100))
			for i := range times {
				_, err := handle(t, h, lambdakittest.Redelivery(msg))
				if !errors.Is(err, lambdakit.ErrPermanent) || !errors.Is(err, lambdakit.ErrCompletionRejected) {
					t.Errorf("delivery %d: got %v; want a permanent ErrCompletionRejected", i+1, err)
				}
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("got %d charges; want 1", n)
			}
			recs := store.Records()
			if len(recs) != 1 {
				t.Fatalf("got %d records; want 1, kept", len(recs))
			}
			for _, rec := range recs {
				if rec.Status != lambdakit.StatusCompleted || rec.Failure == "" || rec.Data != nil {
					t.Errorf("got record %+v; want completed with its failure and no result", rec)
				}
			}
		})
	}

	t.Run("concurrent deliveries", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		h := idempotent(store, stagesUnsupported(fx))
		msg := lambdakittest.Message(paymentBody("p1", 100))
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { _, _ = handle(t, h, lambdakittest.Redelivery(msg)) })
		}
		wg.Wait()
		if _, err := handle(t, h, lambdakittest.Redelivery(msg)); !errors.Is(err, lambdakit.ErrCompletionRejected) {
			t.Errorf("after them: got %v; want ErrCompletionRejected", err)
		}
		if n := fx.Count("p1"); n != 1 {
			t.Errorf("got %d charges; want 1", n)
		}
	})

	t.Run("in a batch with a dead-letter sender the message goes to the DLQ once", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		dlq := &deadLetters{}
		batch := lambdakit.Batch(idempotent(store, stagesUnsupported(fx)), func(o *lambdakit.BatchOptions) {
			o.Logger = silentLogger()
			o.DeadLetters = dlq
		})
		msg := lambdakittest.Message(paymentBody("p1", 100))
		for i := range 3 {
			resp, err := batch(context.Background(), lambdakittest.Event(lambdakittest.Redelivery(msg)))
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("delivery %d: got %+v, %v; want the record handled (sent to the DLQ)", i+1, resp, err)
			}
		}
		if n := fx.Count("p1"); n != 1 {
			t.Errorf("got %d charges; want 1", n)
		}
		if n := len(dlq.ids()); n != 3 {
			t.Errorf("got %d dead letters; want 3 (each delivery fails permanently, none runs the work)", n)
		}
	})

	t.Run("a different payment is not held back", func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		fx := &testenv.Counter{}
		h := idempotent(store, charger(fx))
		bad := idempotent(store, stagesUnsupported(fx))
		if _, err := handle(t, bad, lambdakittest.Message(paymentBody("p1", 100))); err == nil {
			t.Fatal("got success; want the completion rejected")
		}
		if _, err := handle(t, h, lambdakittest.Message(paymentBody("p2", 100))); err != nil {
			t.Fatalf("p2: %v", err)
		}
		if n := fx.Count("p2"); n != 1 {
			t.Errorf("p2: got %d charges; want 1", n)
		}
	})
}

// failingJSON cannot be encoded.
type failingJSON struct{}

func (failingJSON) MarshalJSON() ([]byte, error) { return nil, errors.New("cannot encode") }

func TestResultThatCannotBeEncodedDoesNotRepeatTheWork(t *testing.T) {
	results := map[string]func() any{
		"NaN":                 func() any { return math.NaN() },
		"+Inf":                func() any { return math.Inf(1) },
		"failing MarshalJSON": func() any { return failingJSON{} },
	}
	for name, result := range results {
		t.Run("TypedResult, "+name, func(t *testing.T) {
			store := &lambdakittest.MemoryStore{}
			fx := &testenv.Counter{}
			h := idempotent(store, lambdakit.TypedResult(func(ctx context.Context, p payment) (any, error) {
				fx.Add(p.PaymentID)
				return result(), nil
			}))
			msg := lambdakittest.Message(paymentBody("p1", 100))
			for i := range 3 {
				got, err := handle(t, h, lambdakittest.Redelivery(msg))
				if err != nil || got != nil {
					t.Errorf("delivery %d: got %q, %v; want no result and no error (done, result not kept)", i+1, got, err)
				}
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("got %d charges; want 1", n)
			}
		})
		t.Run("Run, "+name, func(t *testing.T) {
			e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
			fx := &testenv.Counter{}
			fn := func(ctx context.Context, p payment) (any, error) {
				fx.Add(p.PaymentID)
				return result(), nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			first, err := lambdakit.DoTyped(ctx, e, "p1", payment{PaymentID: "p1", Amount: 1}, fn)
			if err != nil {
				t.Fatalf("first call: %v; want the result it computed", err)
			}
			if _, isFloat := first.(float64); !isFloat {
				if _, isFailing := first.(failingJSON); !isFailing {
					t.Errorf("first call: got %#v; want the handler's result", first)
				}
			}
			for i := range 3 {
				got, err := lambdakit.DoTyped(ctx, e, "p1", payment{PaymentID: "p1", Amount: 1}, fn)
				if err != nil || got != nil {
					t.Errorf("duplicate %d: got %#v, %v; want the zero result (none was kept)", i+1, got, err)
				}
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("got %d runs; want 1", n)
			}
		})
	}
}

func TestStageAfterTheHandlerReturnedFails(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	late := make(chan error, 1)
	returned := make(chan struct{})
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		go func() {
			<-returned
			late <- lambdakit.Stage(ctx, func() {})
		}()
		return json.RawMessage(`"done"`), nil
	}))
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1))); err != nil {
		t.Fatal(err)
	}
	close(returned)
	select {
	case err := <-late:
		if !errors.Is(err, lambdakit.ErrNotStaging) {
			t.Errorf("Stage after the handler returned: got %v; want ErrNotStaging (the completion already took the staged writes)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late Stage did not return within 5 s")
	}
}

func TestStageAfterTheHandlerFailedFails(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	var stageCtx context.Context
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		stageCtx = ctx
		return nil, errors.New("declined")
	}))
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1))); err == nil {
		t.Fatal("got success; want the handler's error")
	}
	if err := lambdakit.Stage(stageCtx, func() {}); !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("got %v; want ErrNotStaging", err)
	}
}

// lostReleaseAnswer is a store whose first Release lands but whose answer is
// lost: before the caller's retry reaches the store, another owner takes the
// key, as happens when the SDK retries a DeleteItem whose answer timed out.
type lostReleaseAnswer struct {
	*lambdakittest.MemoryStore
	mu   sync.Mutex
	done bool
}

func (s *lostReleaseAnswer) Release(ctx context.Context, id, lease string) error {
	if err := s.MemoryStore.Release(ctx, id, lease); err != nil {
		return err
	}
	s.mu.Lock()
	first := !s.done
	s.done = true
	s.mu.Unlock()
	if !first {
		return nil
	}
	// The other owner is an engine too: its lease token starts with when
	// it acquired the key, in epoch milliseconds.
	now := time.Now()
	other := lambdakit.IdempotencyRecord{ID: id, Status: lambdakit.StatusInProgress, Expiration: now.Add(time.Hour),
		InProgressExpiration: now.Add(time.Minute), Lease: fmt.Sprintf("%d.another-owner", now.UnixMilli())}
	if _, ok, err := s.MemoryStore.Acquire(ctx, other, now); err != nil || !ok {
		return fmt.Errorf("the other owner could not take the key: %v", err)
	}
	return s.MemoryStore.Release(ctx, id, lease) // the retry: refused
}

func TestReleaseWhoseAnswerWasLostIsNotALostLease(t *testing.T) {
	store := &lostReleaseAnswer{MemoryStore: &lambdakittest.MemoryStore{}}
	declined := errors.New("declined")
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, declined
	}))
	_, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 1)))
	var lost *lambdakit.LeaseLostError
	if errors.As(err, &lost) || errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("got %v; want the handler's error alone: this owner released in time", err)
	}
	if !errors.Is(err, declined) {
		t.Errorf("got %v; want the handler's error", err)
	}
}

func TestStageOutsideIdempotentHandler(t *testing.T) {
	if err := lambdakit.Stage(context.Background(), func() {}); !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("got %v; want ErrNotStaging", err)
	}
}

func TestIdempotentStagedWritesCommitWithCompletion(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	book := &ledger{}
	fail := true
	h := idempotent(store, lambdakit.Typed(func(ctx context.Context, p payment) error {
		if err := lambdakit.Stage(ctx, book.write(p.PaymentID)); err != nil {
			return err
		}
		if fail {
			return errors.New("failed after staging")
		}
		return nil
	}))
	msg := lambdakittest.Message(paymentBody("p1", 100))
	if _, err := handle(t, h, msg); err == nil {
		t.Fatal("got success; want the handler's error")
	}
	if n := book.count("p1"); n != 0 {
		t.Errorf("got %d ledger rows after a failed handler; want its staged write dropped", n)
	}
	fail = false
	for range 3 {
		if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if n := book.count("p1"); n != 1 {
		t.Errorf("got %d ledger rows; want 1", n)
	}
}

// limitedStore refuses to keep results larger than max bytes, as DynamoDB
// refuses items over 400 KB.
type limitedStore struct {
	*lambdakittest.MemoryStore
	max int
}

func (s limitedStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if len(rec.Data) > s.max {
		return fmt.Errorf("%d bytes: %w", len(rec.Data), lambdakit.ErrResultNotStorable)
	}
	return s.MemoryStore.Complete(ctx, rec)
}

func TestIdempotentResultTooLargeCompletesWithoutResult(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx)) // result "ch_p-long" is 11 bytes
	msg := lambdakittest.Message(paymentBody("p-long", 1))
	got, err := handle(t, h, msg)
	if err != nil || string(got) != `"ch_p-long"` {
		t.Fatalf("first: got %s, %v; want the result and success", got, err)
	}
	got, err = handle(t, h, lambdakittest.Redelivery(msg))
	if err != nil || got != nil {
		t.Errorf("duplicate: got %s, %v; want success with no cached result", got, err)
	}
	if c := fx.Count("p-long"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
	for _, rec := range store.Records() {
		if rec.Status != lambdakit.StatusCompleted {
			t.Errorf("got status %s; want the record completed, not left in progress", rec.Status)
		}
	}
}

// A result too large for an item (400 KB) is not cached; the record is
// still completed, so the work is never repeated, and duplicates get no
// result; with DoTyped, a duplicate whose result could not be kept (see
// ErrResultNotStorable) gets the zero Res. That holds for
// a container with a warm cache (CacheSize) too: the result the store did
// not keep is not put in the cache, so a duplicate gets no result whichever
// container it lands on, and no result over 400 KB is held in memory.
func TestUnstorableResultIsNotReplayedFromTheWarmCache(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	fx := &testenv.Counter{}
	h := idempotent(store, charger(fx), func(o *lambdakit.Options) { o.CacheSize = 16 })
	msg := lambdakittest.Message(paymentBody("p-long", 1))
	if got, err := handle(t, h, msg); err != nil || string(got) != `"ch_p-long"` {
		t.Fatalf("first: got %s, %v; want the result and success", got, err)
	}
	// What another container (no warm cache) answers for the duplicate.
	cold := idempotent(store, charger(fx))
	coldGot, err := handle(t, cold, lambdakittest.Redelivery(msg))
	if err != nil || coldGot != nil {
		t.Fatalf("duplicate in another container: got %s, %v; want success with no result", coldGot, err)
	}
	got, err := handle(t, h, lambdakittest.Redelivery(msg))
	if err != nil || got != nil {
		t.Errorf("duplicate in the warm container: got %q, %v; want success with no result, as the store holds (and as another container answers: %q)", got, err, coldGot)
	}
	if c := fx.Count("p-long"); c != 1 {
		t.Errorf("got %d charges; want 1", c)
	}
}

// The same holds for a message with the key that waited in the container
// for the first one: it gets no result, as the record holds none and a
// redelivery elsewhere gets none.
func TestUnstorableResultIsNotReplayedToAWaiter(t *testing.T) {
	store := limitedStore{&lambdakittest.MemoryStore{}, 8}
	entered := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int32
	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if runs.Add(1) == 1 {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return []byte(`"a result longer than 8 bytes"`), nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := paymentBody("p-wait", 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m := lambdakittest.Message(body)
		_, _ = h.Handle(ctx, &m)
	}()
	<-entered
	type res struct {
		out []byte
		err error
	}
	waiter := make(chan res, 1)
	go func() {
		m := lambdakittest.Message(body)
		out, err := h.Handle(ctx, &m)
		waiter <- res{out, err}
	}()
	time.Sleep(100 * time.Millisecond) // let it join the flight
	close(release)
	<-done
	select {
	case r := <-waiter:
		if r.err != nil || r.out != nil {
			t.Errorf("waiter: got %q, %v; want success with no result, as the record holds", r.out, r.err)
		}
	case <-ctx.Done():
		t.Fatal("waiter did not return")
	}
}

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
