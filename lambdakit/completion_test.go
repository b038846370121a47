package lambdakit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
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

// The recovery point (EffectDone): once the handler has declared its
// effect, no failure the process survives may release the key, since a
// retry would repeat the effect. Checked on the memory store and on
// DynamoDB (moto).

// effectStores returns the stores the recovery point is checked on, by
// name, each a fresh one per call: the memory store, and DynamoDB on moto.
func effectStores(t *testing.T) []struct {
	name string
	new  func(t *testing.T) lambdakit.Store
} {
	db := dynamostoretest.Start(t)
	return []struct {
		name string
		new  func(t *testing.T) lambdakit.Store
	}{
		{"memory", func(*testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} }},
		{"dynamodb", func(t *testing.T) lambdakit.Store {
			s, err := dynamostore.New(db.Client(), db.NewTable(t))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

// effectPrefix is the record prefix of the recovery point's tests.
const effectPrefix = "effect"

// charges is a handler that charges (counted), fails with before(ctx) if
// that is not nil, declares the charge done, and then returns after(ctx)'s
// error.
func charges(fx *testenv.Counter, before, after func(ctx context.Context) error) lambdakit.Handler {
	return lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
		if before != nil {
			if err := before(ctx); err != nil {
				return "", err
			}
		}
		fx.Add(p.PaymentID)
		lambdakit.EffectDone(ctx, "charge ch_"+p.PaymentID)
		if after != nil {
			if err := after(ctx); err != nil {
				return "", err
			}
		}
		return "ch_" + p.PaymentID, nil
	})
}

// storedRecord reads the record of payment id from store.
func storedRecord(t *testing.T, store lambdakit.Store, id string) lambdakit.IdempotencyRecord {
	t.Helper()
	rid := lambdakit.RecordID(effectPrefix, id)
	got, err := store.(lambdakit.BatchGetter).GetRecords(t.Context(), []string{rid})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := got[rid]
	if !ok {
		t.Fatalf("no record %s; want one", rid)
	}
	return rec
}

func withEffectPrefix(o *lambdakit.Options) { o.Prefix = effectPrefix }

func TestFailureAfterTheEffectNeverRepeatsIt(t *testing.T) {
	errLedger := errors.New("ledger down")
	failures := map[string]func(ctx context.Context) error{
		"handler error": func(context.Context) error { return errLedger },
		"panic":         func(context.Context) error { panic("after the charge") },
		// No store commits a staged string: the completion is refused
		// for good (ErrStagingUnsupported).
		"completion refused": func(ctx context.Context) error { return lambdakit.Stage(ctx, "no store writes this") },
	}
	for _, st := range effectStores(t) {
		for name, after := range failures {
			t.Run(st.name+"/"+name, func(t *testing.T) {
				store := st.new(t)
				fx := &testenv.Counter{}
				msg := lambdakittest.Message(paymentBody("p1", 100))
				for i := range 3 {
					// A fresh container each time: the store answers, not
					// the first one's cache.
					h := idempotent(store, charges(fx, nil, after), withEffectPrefix)
					_, err := handle(t, h, lambdakittest.Redelivery(msg))
					if !errors.Is(err, lambdakit.ErrPermanent) || !errors.Is(err, lambdakit.ErrFailedAfterEffect) {
						t.Errorf("delivery %d: got %v; want a permanent ErrFailedAfterEffect", i+1, err)
					}
					if got := lambdakit.ReasonOf(err); got != lambdakit.ReasonAfterEffect {
						t.Errorf("delivery %d: reason %s; want %s", i+1, got, lambdakit.ReasonAfterEffect)
					}
				}
				if n := fx.Count("p1"); n != 1 {
					t.Errorf("charged %d times; want 1", n)
				}
				rec := storedRecord(t, store, "p1")
				if rec.Status != lambdakit.StatusCompleted || rec.Effect != "charge ch_p1" || rec.Data != nil ||
					!strings.Contains(rec.Failure, "failed after its effect: reconcile") {
					t.Errorf("got record %+v; want completed with the failure, the effect and no result", rec)
				}
			})
		}
	}
}

func TestErrorBeforeTheEffectStillReleasesTheKey(t *testing.T) {
	for _, st := range effectStores(t) {
		t.Run(st.name, func(t *testing.T) {
			store := st.new(t)
			fx := &testenv.Counter{}
			var tries atomic.Int32
			gatewayDown := func(context.Context) error {
				if tries.Add(1) == 1 {
					return errors.New("gateway down")
				}
				return nil
			}
			h := idempotent(store, charges(fx, gatewayDown, nil), withEffectPrefix)
			msg := lambdakittest.Message(paymentBody("p1", 100))
			if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err == nil || errors.Is(err, lambdakit.ErrPermanent) {
				t.Fatalf("first delivery: got %v; want a failure that is not permanent", err)
			}
			if _, err := handle(t, h, lambdakittest.Redelivery(msg)); err != nil {
				t.Fatalf("second delivery: got %v; want it to run and succeed", err)
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("charged %d times; want 1", n)
			}
			if rec := storedRecord(t, store, "p1"); rec.Failure != "" || rec.Effect != "charge ch_p1" {
				t.Errorf("got record %+v; want completed without failure, with the effect", rec)
			}
		})
	}
}

// flakyCompletions is a store whose first fail completions fail with
// failWith, by default a transient error (all of them when fail is
// negative), and which counts its releases.
type flakyCompletions struct {
	lambdakit.Store
	mu        sync.Mutex
	fail      int
	failWith  error
	completes int
	releases  int
}

var errStoreUnreachable = errors.New("store unreachable")

func (s *flakyCompletions) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	s.mu.Lock()
	s.completes++
	failing := s.fail != 0
	if s.fail > 0 {
		s.fail--
	}
	s.mu.Unlock()
	switch {
	case failing && s.failWith != nil:
		return s.failWith
	case failing:
		return errStoreUnreachable
	}
	return s.Store.Complete(ctx, rec)
}

func (s *flakyCompletions) Release(ctx context.Context, id, lease string) error {
	s.mu.Lock()
	s.releases++
	s.mu.Unlock()
	return s.Store.Release(ctx, id, lease)
}

func (s *flakyCompletions) counts() (completes, releases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completes, s.releases
}

func TestTransientCompletionFailureAfterTheEffectNeverReleasesTheKey(t *testing.T) {
	for _, st := range effectStores(t) {
		t.Run(st.name+"/retried until it lands", func(t *testing.T) {
			inner := st.new(t)
			store := &flakyCompletions{Store: inner, fail: 2}
			fx := &testenv.Counter{}
			h := idempotent(store, charges(fx, nil, nil), withEffectPrefix)
			if _, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 100))); err != nil {
				t.Fatalf("got %v; want the completion retried until it landed", err)
			}
			if completes, releases := store.counts(); completes != 3 || releases != 0 {
				t.Errorf("got %d completions and %d releases; want 3 and none", completes, releases)
			}
			if rec := storedRecord(t, inner, "p1"); rec.Status != lambdakit.StatusCompleted || rec.Failure != "" {
				t.Errorf("got record %+v; want completed", rec)
			}
		})
		t.Run(st.name+"/never lands within the lease", func(t *testing.T) {
			inner := st.new(t)
			store := &flakyCompletions{Store: inner, fail: -1}
			fx := &testenv.Counter{}
			h := idempotent(store, charges(fx, nil, nil), withEffectPrefix)
			msg := lambdakittest.Message(paymentBody("p1", 100))
			// A short lease: the engine retries until it ends.
			ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
			defer cancel()
			_, err := h.Handle(ctx, &msg)
			if !errors.Is(err, lambdakit.ErrFailedAfterEffect) || !errors.Is(err, errStoreUnreachable) || !errors.Is(err, lambdakit.ErrPermanent) {
				t.Errorf("got %v; want a permanent ErrFailedAfterEffect with the store's error", err)
			}
			if completes, releases := store.counts(); completes < 2 || releases != 0 {
				t.Errorf("got %d completions and %d releases; want retries and no release", completes, releases)
			}
			// The key stays locked until its lease ends: a redelivery
			// meanwhile does not charge again.
			if rec := storedRecord(t, inner, "p1"); rec.Status != lambdakit.StatusInProgress {
				t.Errorf("got record %+v; want it still locked", rec)
			}
			if n := fx.Count("p1"); n != 1 {
				t.Errorf("charged %d times; want 1", n)
			}
		})
	}
}

func TestEffectDoneOutsideARecordableRun(t *testing.T) {
	if lambdakit.EffectDone(t.Context(), "charge ch_1") {
		t.Error("outside a handler: got true; want false")
	}
	store := &lambdakittest.MemoryStore{}
	var recorded bool
	h := lambdakit.HandlerFunc(func(ctx context.Context, _ *events.SQSMessage) ([]byte, error) {
		recorded = lambdakit.EffectDone(ctx, "charge ch_1")
		return nil, nil
	})
	if _, err := handle(t, idempotent(store, h, func(o *lambdakit.Options) { o.StagedOnly = true }), lambdakittest.Message(paymentBody("p1", 1))); err != nil {
		t.Fatal(err)
	}
	if recorded {
		t.Error("under StagedOnly: got true; want false")
	}
	if _, err := handle(t, idempotent(store, h), lambdakittest.Message(paymentBody("p2", 1))); err != nil {
		t.Fatal(err)
	}
	if !recorded {
		t.Error("in an idempotent handler: got false; want true")
	}
}

// What EffectDone keeps is UTF-8 and at most MaxEffectBytes as it is sent:
// a detail that is not UTF-8 would grow when the SDK sends each bad byte
// as U+FFFD (three bytes), past the room the staging checks keep for it.
func TestEffectDoneKeepsUTF8WithinItsBound(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	h := lambdakit.HandlerFunc(func(ctx context.Context, _ *events.SQSMessage) ([]byte, error) {
		lambdakit.EffectDone(ctx, "charge "+strings.Repeat("\xff", 2*lambdakit.MaxEffectBytes))
		lambdakit.EffectDone(ctx, "ok\xe2\x82") // a cut character at the end
		return nil, errors.New("ledger down")
	})
	if _, err := handle(t, idempotent(store, h), lambdakittest.Message(paymentBody("p1", 1))); !errors.Is(err, lambdakit.ErrFailedAfterEffect) {
		t.Fatalf("got %v; want ErrFailedAfterEffect", err)
	}
	recs := store.Records()
	if len(recs) != 1 {
		t.Fatalf("%d records; want 1", len(recs))
	}
	for _, rec := range recs {
		if !utf8.ValidString(rec.Effect) || len(rec.Effect) > lambdakit.MaxEffectBytes || !strings.HasPrefix(rec.Effect, "charge \ufffd") {
			t.Errorf("kept effect of %d bytes, UTF-8: %v, starting %.12q; want UTF-8, at most %d bytes, the bad bytes as U+FFFD",
				len(rec.Effect), utf8.ValidString(rec.Effect), rec.Effect, lambdakit.MaxEffectBytes)
		}
	}
}

// failsAfterEffect charges (counted), declares it, and then fails as the
// payment ID says: "err-…" with an error, "panic-…" with a panic; others
// succeed.
func failsAfterEffect(fx *testenv.Counter) lambdakit.Handler {
	return charges(fx, nil, func(ctx context.Context) error {
		id, _ := lambdakit.StagingRecord(ctx)
		switch {
		case strings.Contains(id, "#"+lambdakit.KeyHash("err-1")):
			return errors.New("ledger down")
		case strings.Contains(id, "#"+lambdakit.KeyHash("panic-1")):
			panic("after the charge")
		}
		return nil
	})
}

func TestFailureAfterTheEffectIsDeadLetteredCountedAndLogged(t *testing.T) {
	for _, dlq := range []bool{true, false} {
		t.Run(fmt.Sprintf("dead-letter sender %v", dlq), func(t *testing.T) {
			fx := &testenv.Counter{}
			dl := &deadLetters{}
			var metrics bytes.Buffer
			b, log := newBatch(idempotent(&lambdakittest.MemoryStore{}, failsAfterEffect(fx), withEffectPrefix), func(o *lambdakit.BatchOptions) {
				o.MetricsWriter = &metrics
				o.AllowAllFailed = true
				if dlq {
					o.DeadLetters = dl
				}
			})
			msgs := []events.SQSMessage{
				lambdakittest.Message(paymentBody("err-1", 1)),
				lambdakittest.Message(paymentBody("panic-1", 1)),
				lambdakittest.Message(paymentBody("ok-1", 1)),
			}
			resp, err := b(batchCtx(t), lambdakittest.Event(msgs...))
			if err != nil {
				t.Fatal(err)
			}
			failed := []string{msgs[0].MessageId, msgs[1].MessageId}
			if dlq {
				wantFailed(t, resp)
				if got := dl.ids(); !slices.Equal(slices.Sorted(slices.Values(got)), failed) {
					t.Errorf("dead letters %q; want %q", got, failed)
				}
				for _, reason := range dl.reasons {
					if !errors.Is(reason, lambdakit.ErrFailedAfterEffect) || !strings.Contains(reason.Error(), "failed after its effect: reconcile") {
						t.Errorf("dead-letter reason %v; want ErrFailedAfterEffect", reason)
					}
				}
			} else {
				wantFailed(t, resp, failed...)
			}
			lines := log.byMessageID(t)
			for _, id := range failed {
				if code := lines[id]["reasonCode"]; code != string(lambdakit.ReasonAfterEffect) {
					t.Errorf("message %s: reasonCode %v; want %s", id, code, lambdakit.ReasonAfterEffect)
				}
				if !strings.Contains(lines[id]["reason"].(string), "failed after its effect: reconcile") {
					t.Errorf("message %s: reason %v; want it to say to reconcile", id, lines[id]["reason"])
				}
			}
			m := emfLine(t, bytes.TrimSpace(metrics.Bytes()))
			if m["FailedAfterEffect"] != 2.0 || m["Failed"] != 2.0 || m["FailedPermanent"] != 0.0 {
				t.Errorf("FailedAfterEffect %v, Failed %v, FailedPermanent %v; want 2, 2, 0", m["FailedAfterEffect"], m["Failed"], m["FailedPermanent"])
			}
		})
	}
}

// A handler that calls runtime.Goexit after its effect (as t.FailNow does)
// unwinds past the engine's usual path: the record is completed with the
// failure all the same, and the redelivery does not run it again.
func TestGoexitAfterTheEffectNeverRepeatsIt(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := idempotent(store, charges(fx, nil, func(context.Context) error { runtime.Goexit(); return nil }), withEffectPrefix)
	b, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.AllowAllFailed = true })
	msg := lambdakittest.Message(paymentBody("p1", 100))
	resp, err := b(batchCtx(t), lambdakittest.Event(msg))
	if err != nil {
		t.Fatal(err)
	}
	wantFailed(t, resp, msg.MessageId)
	if _, err := handle(t, h, lambdakittest.Redelivery(msg)); !errors.Is(err, lambdakit.ErrFailedAfterEffect) || !errors.Is(err, lambdakit.ErrPermanent) {
		t.Errorf("redelivery: got %v; want a permanent ErrFailedAfterEffect", err)
	}
	if n := fx.Count("p1"); n != 1 {
		t.Errorf("charged %d times; want 1", n)
	}
	if rec := storedRecord(t, store, "p1"); rec.Effect != "charge ch_p1" || !strings.Contains(rec.Failure, lambdakit.ErrHandlerExited.Error()) {
		t.Errorf("got record %+v; want the failure and the effect", rec)
	}
}

// A lease lost at the completion after the effect is another owner's work
// now: it fails as a lost lease (counted, retried), not as a failure to
// reconcile, and nothing is released.
func TestLeaseLostAfterTheEffectFailsAsALostLease(t *testing.T) {
	store := &flakyCompletions{Store: &lambdakittest.MemoryStore{}, fail: -1, failWith: lambdakit.ErrLeaseLost}
	h := idempotent(store, charges(&testenv.Counter{}, nil, nil), withEffectPrefix)
	_, err := handle(t, h, lambdakittest.Message(paymentBody("p1", 100)))
	if lost := (*lambdakit.LeaseLostError)(nil); !errors.As(err, &lost) || errors.Is(err, lambdakit.ErrPermanent) || lambdakit.ReasonOf(err) != lambdakit.ReasonLeaseLost {
		t.Errorf("got %v; want a *LeaseLostError, not permanent", err)
	}
	if completes, releases := store.counts(); completes != 1 || releases != 0 {
		t.Errorf("got %d completions and %d releases; want 1 and none", completes, releases)
	}
}

// markingStore is a store whose completions never land (flakyCompletions
// failing them all) but whose MarkEffect does: as far as the store knows,
// its owner stopped after its effect.
type markingStore struct {
	*flakyCompletions
	lambdakit.EffectMarker
}

// Options.StoreEffect keeps the point in the store: an owner that stops
// after its effect without recording how it ended (here its completions
// never land before its lease ends) leaves a record that a later delivery
// does not take over. Without it the record is taken over and the work
// runs again: the external system's idempotency key is the defence then.
func TestStoreEffectKeepsAStoppedOwnersEffectFromRunningAgain(t *testing.T) {
	for _, st := range effectStores(t) {
		for _, keep := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/StoreEffect %v", st.name, keep), func(t *testing.T) {
				inner := st.new(t)
				fx := &testenv.Counter{}
				storeEffect := func(o *lambdakit.Options) { o.StoreEffect = keep }
				stopped := markingStore{&flakyCompletions{Store: inner, fail: -1}, inner.(lambdakit.EffectMarker)}
				msg := lambdakittest.Message(paymentBody("p1", 100))
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				_, _ = idempotent(stopped, charges(fx, nil, nil), withEffectPrefix, storeEffect).Handle(ctx, &msg)
				cancel()

				// Past that lease, in another container.
				later := func(o *lambdakit.Options) { o.Now = func() time.Time { return time.Now().Add(time.Minute) } }
				ctx, cancel = context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				again := lambdakittest.Redelivery(msg)
				_, err := idempotent(inner, charges(fx, nil, nil), withEffectPrefix, storeEffect, later).Handle(ctx, &again)
				switch {
				case keep && (!errors.Is(err, lambdakit.ErrFailedAfterEffect) || !errors.Is(err, lambdakit.ErrPermanent)):
					t.Errorf("redelivery: got %v; want a permanent ErrFailedAfterEffect", err)
				case keep && fx.Count("p1") != 1:
					t.Errorf("charged %d times; want 1", fx.Count("p1"))
				case !keep && (err != nil || fx.Count("p1") != 2):
					t.Errorf("redelivery: got %v after %d charges; want the record taken over and charged again", err, fx.Count("p1"))
				}
			})
		}
	}
}

// A record that StoreEffect marked is kept a TTL past its lease, as a
// completed record is kept a TTL past its completion: with a TTL shorter
// than the lease (3 s and 6 s here) it would otherwise expire as the lease
// ends, the very moment a later delivery may come for it, and be taken
// over. The owner stops at once (its completions are refused, the record
// keeps only the mark), and the later delivery comes on the engine's clock.
func TestStoreEffectOutlivesALeaseLongerThanTheTTL(t *testing.T) {
	for _, st := range effectStores(t) {
		t.Run(st.name, func(t *testing.T) {
			inner := st.new(t)
			fx := &testenv.Counter{}
			opts := func(o *lambdakit.Options) { o.StoreEffect, o.TTL = true, 3*time.Second }
			refused := &flakyCompletions{Store: inner, fail: -1, failWith: lambdakit.ErrCompletionRejected}
			stopped := markingStore{refused, inner.(lambdakit.EffectMarker)}
			msg := lambdakittest.Message(paymentBody("p1", 100))
			ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
			defer cancel()
			_, _ = idempotent(stopped, charges(fx, nil, nil), withEffectPrefix, opts).Handle(ctx, &msg)

			// Past that lease, within a TTL of its end, in another container.
			later := func(o *lambdakit.Options) { o.Now = func() time.Time { return time.Now().Add(8 * time.Second) } }
			again := lambdakittest.Redelivery(msg)
			_, err := idempotent(inner, charges(fx, nil, nil), withEffectPrefix, opts, later).Handle(t.Context(), &again)
			if !errors.Is(err, lambdakit.ErrFailedAfterEffect) || fx.Count("p1") != 1 {
				t.Errorf("redelivery: got %v after %d charges; want a permanent ErrFailedAfterEffect after 1", err, fx.Count("p1"))
			}
		})
	}
}

// slowFirstMark is an EffectMarker whose first MarkEffect is held until
// a second one has landed (or 200 ms have passed): the answers of two
// marks sent at once may come back in either order.
type slowFirstMark struct {
	lambdakit.EffectMarker
	n       atomic.Int32
	entered chan struct{} // closed as the first mark is held
	landed  chan struct{} // closed as the second mark lands
}

func (m *slowFirstMark) MarkEffect(ctx context.Context, id, lease, effect string) error {
	switch m.n.Add(1) {
	case 1:
		close(m.entered)
		select {
		case <-m.landed:
		case <-time.After(200 * time.Millisecond):
		}
		return m.EffectMarker.MarkEffect(ctx, id, lease, effect)
	case 2:
		defer close(m.landed)
	}
	return m.EffectMarker.MarkEffect(ctx, id, lease, effect)
}

// Two goroutines that declare their effects at once both reach the store
// under StoreEffect: the record keeps both details, whichever mark lands
// last, for an owner that then stops (its completions refused here).
func TestStoreEffectKeepsEveryConcurrentDetail(t *testing.T) {
	for _, st := range effectStores(t) {
		t.Run(st.name, func(t *testing.T) {
			inner := st.new(t)
			marks := &slowFirstMark{EffectMarker: inner.(lambdakit.EffectMarker), entered: make(chan struct{}), landed: make(chan struct{})}
			refused := &flakyCompletions{Store: inner, fail: -1, failWith: lambdakit.ErrCompletionRejected}
			h := lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
				var wg sync.WaitGroup
				wg.Go(func() { lambdakit.EffectDone(ctx, "charge a") })
				select {
				case <-marks.entered:
				case <-time.After(5 * time.Second):
					return "", errors.New("the first mark never reached the store")
				}
				lambdakit.EffectDone(ctx, "charge b")
				wg.Wait()
				return "ok", nil
			})
			storeEffect := func(o *lambdakit.Options) { o.StoreEffect = true }
			_, _ = handle(t, idempotent(markingStore{refused, marks}, h, withEffectPrefix, storeEffect), lambdakittest.Message(paymentBody("p1", 100)))
			if rec := storedRecord(t, inner, "p1"); rec.Effect != "charge a; charge b" {
				t.Errorf("stored effect %q; want %q", rec.Effect, "charge a; charge b")
			}
		})
	}
}

// Options.StoreEffect costs one write per message that declares an effect,
// and nothing for one that does not; it needs a store that can keep it.
func TestStoreEffectCostsOneWrite(t *testing.T) {
	for _, declare := range []bool{true, false} {
		store := &lambdakittest.MemoryStore{}
		h := lambdakit.HandlerFunc(func(ctx context.Context, _ *events.SQSMessage) ([]byte, error) {
			if declare {
				lambdakit.EffectDone(ctx, "charge ch_1")
			}
			return nil, nil
		})
		if _, err := handle(t, idempotent(store, h, func(o *lambdakit.Options) { o.StoreEffect = true }), lambdakittest.Message(paymentBody("p1", 1))); err != nil {
			t.Fatal(err)
		}
		want := 1
		if declare {
			want = 2
		}
		if c := store.Calls(); c.Acquire != 1 || c.Complete != want {
			t.Errorf("effect declared %v: got %+v; want 1 acquire and %d writes after it", declare, c, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("StoreEffect on a store without MarkEffect: NewOnce did not panic; want it to")
		}
	}()
	lambdakit.NewOnce(struct{ lambdakit.Store }{&lambdakittest.MemoryStore{}}, func(o *lambdakit.Options) { o.StoreEffect = true })
}

// losesFirstCompletionAnswer completes the first record it is asked to,
// and then reports a failure: the answer of a request that landed, lost.
type losesFirstCompletionAnswer struct {
	*lambdakittest.MemoryStore
	lost atomic.Bool
}

func (s *losesFirstCompletionAnswer) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if err := s.MemoryStore.Complete(ctx, rec); err != nil || !s.lost.CompareAndSwap(false, true) {
		return err
	}
	return errors.New("answer lost")
}

// After the recovery point, a completion that failed is sent again; when
// the first one landed, its staged writes must not commit twice.
func TestStagedWritesOfACompletionSentAgainAfterALostAnswerCommitOnce(t *testing.T) {
	store := &losesFirstCompletionAnswer{MemoryStore: &lambdakittest.MemoryStore{}}
	e := lambdakit.NewOnce(store, func(o *lambdakit.Options) { o.Logger = silentLogger() })
	var credits atomic.Int32
	out, err := e.Do(t.Context(), "pay-1", nil, func(ctx context.Context) ([]byte, error) {
		lambdakit.EffectDone(ctx, "charge ch_1")
		return []byte(`"ch_1"`), lambdakit.Stage(ctx, func() { credits.Add(1) })
	})
	if !store.lost.Load() {
		t.Fatal("no completion answer was lost; the test checks nothing")
	}
	if err != nil || string(out) != `"ch_1"` {
		t.Errorf("Do = %s, %v; want the result: the completion landed", out, err)
	}
	if n := credits.Load(); n != 1 {
		t.Errorf("the staged write committed %d times; want once", n)
	}
}
