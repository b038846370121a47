package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// RunCommitContract checks that a store meets lambdakit.Committer's
// contract, and keeps a completed record with no expiration (NeverExpire)
// forever. newStore must return a store that implements
// lambdakit.Committer; it may return the same one every time.
func RunCommitContract(t *testing.T, newStore func(t *testing.T) lambdakit.Store) {
	base := time.Now().Truncate(time.Second)
	committer := func(t *testing.T) (lambdakit.Store, lambdakit.Committer) {
		t.Helper()
		s := newStore(t)
		c, ok := lambdakit.StoreAs[lambdakit.Committer](s)
		if !ok {
			t.Fatalf("%T does not implement lambdakit.Committer", s)
		}
		return s, c
	}
	completed := func(t *testing.T, data string) lambdakit.IdempotencyRecord {
		return lambdakit.IdempotencyRecord{
			ID:         fmt.Sprintf("commit#%s#%d", t.Name(), contractSeq.Add(1)),
			Status:     lambdakit.StatusCompleted,
			Expiration: base.Add(time.Hour),
			Validation: "v1",
			Data:       []byte(data),
			Lease:      fmt.Sprintf("lease-%d", contractSeq.Add(1)),
		}
	}
	commit := func(t *testing.T, c lambdakit.Committer, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool) {
		t.Helper()
		old, ok, err := c.Commit(t.Context(), rec, now)
		if err != nil {
			t.Fatalf("Commit(%s): %v", rec.ID, err)
		}
		return old, ok
	}

	t.Run("a new key is committed, and a second commit gets the record", func(t *testing.T) {
		s, c := committer(t)
		rec := completed(t, `"first"`)
		if _, ok := commit(t, c, rec, base); !ok {
			t.Fatal("Commit of a new key = not created; want created")
		}
		second := rec
		second.Lease, second.Data, second.Validation = "second", []byte(`"second"`), "v2"
		old, ok := commit(t, c, second, base.Add(time.Second))
		if ok || old.Status != lambdakit.StatusCompleted || string(old.Data) != `"first"` || old.Validation != "v1" || old.Lease != rec.Lease {
			t.Errorf("second Commit: got %+v, created=%v; want the first record, not created", old, ok)
		}
		// A two-step owner finds it completed too.
		old, acquired, err := s.Acquire(t.Context(), lambdakit.IdempotencyRecord{ID: rec.ID, Status: lambdakit.StatusInProgress,
			Expiration: base.Add(time.Hour), InProgressExpiration: base.Add(time.Minute), Lease: "two-step"}, base.Add(time.Second))
		if err != nil || acquired || old.Status != lambdakit.StatusCompleted {
			t.Errorf("Acquire after Commit: got %+v, acquired=%v, %v; want the completed record", old, acquired, err)
		}
	})

	t.Run("an in-progress record is returned, and stays", func(t *testing.T) {
		s, c := committer(t)
		rec := completed(t, `"x"`)
		lock := lambdakit.IdempotencyRecord{ID: rec.ID, Status: lambdakit.StatusInProgress, Expiration: base.Add(time.Hour),
			InProgressExpiration: base.Add(1500 * time.Millisecond), Validation: "v1", Lease: "owner"}
		if _, ok, err := s.Acquire(t.Context(), lock, base); err != nil || !ok {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		old, ok := commit(t, c, rec, base.Add(time.Second))
		if ok || old.Status != lambdakit.StatusInProgress || old.Lease != "owner" {
			t.Errorf("got %+v, created=%v; want the owner's lock", old, ok)
		}
		// Its lease over (x.5 s), the key is committed.
		if _, ok := commit(t, c, rec, base.Add(1500*time.Millisecond)); !ok {
			t.Error("Commit after the lease ended = not created; want created")
		}
		if err := s.Complete(t.Context(), lambdakit.IdempotencyRecord{ID: rec.ID, Status: lambdakit.StatusCompleted, Lease: "owner", Expiration: base.Add(time.Hour)}); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("the old owner's Complete: got %v; want ErrLeaseLost", err)
		}
	})

	t.Run("an expired record is replaced, at the second it expires", func(t *testing.T) {
		_, c := committer(t)
		rec := completed(t, `"old"`)
		rec.Expiration = base.Add(900 * time.Millisecond) // kept until x+1 s
		commit(t, c, rec, base)
		next := rec
		next.Lease, next.Data, next.Expiration = "next", []byte(`"new"`), base.Add(time.Hour)
		if _, ok := commit(t, c, next, base.Add(999*time.Millisecond)); ok {
			t.Fatal("Commit at x.999 s = created; want refused: the record counts until x+1 s")
		}
		if _, ok := commit(t, c, next, base.Add(time.Second)); !ok {
			t.Error("Commit at x+1 s = not created; want created")
		}
	})

	t.Run("a retried commit gets the caller's own record", func(t *testing.T) {
		_, c := committer(t)
		rec := completed(t, `"r"`)
		commit(t, c, rec, base)
		old, ok := commit(t, c, rec, base)
		if ok || old.Lease != rec.Lease || old.Status != lambdakit.StatusCompleted {
			t.Errorf("got %+v, created=%v; want the caller's own record", old, ok)
		}
	})

	t.Run("a record kept forever never expires", func(t *testing.T) {
		s, c := committer(t)
		rec := completed(t, `"kept"`)
		rec.Expiration = time.Time{}
		commit(t, c, rec, base)
		later := base.Add(100 * 365 * 24 * time.Hour)
		old, ok := commit(t, c, completed(t, ""), later) // another key: unaffected
		if !ok {
			t.Errorf("Commit of another key: got %+v; want created", old)
		}
		again := rec
		again.Lease = "later"
		if old, ok := commit(t, c, again, later); ok || string(old.Data) != `"kept"` || !old.Expiration.IsZero() {
			t.Errorf("a century later: got %+v, created=%v; want the record, with no expiration", old, ok)
		}
		// The same for a record locked, then completed, with no expiration.
		lock := lambdakit.IdempotencyRecord{ID: rec.ID + "-2", Status: lambdakit.StatusInProgress, Expiration: base.Add(time.Hour),
			InProgressExpiration: base.Add(time.Minute), Lease: "two-step"}
		if _, ok, err := s.Acquire(t.Context(), lock, base); err != nil || !ok {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		lock.Status, lock.Expiration = lambdakit.StatusCompleted, time.Time{}
		if err := s.Complete(t.Context(), lock); err != nil {
			t.Fatal(err)
		}
		lock.Lease = "later"
		if old, ok := commit(t, c, lock, later); ok || old.Status != lambdakit.StatusCompleted || !old.Expiration.IsZero() {
			t.Errorf("completed forever, a century later: got %+v, created=%v; want the record", old, ok)
		}
	})

	t.Run("20 concurrent commits of one key: exactly one is created", func(t *testing.T) {
		_, c := committer(t)
		rec := completed(t, `"race"`)
		wins := race(t, 20, "Commit", func(i int) (bool, error) {
			r := rec
			r.Lease = fmt.Sprintf("g%d", i)
			_, ok, err := c.Commit(t.Context(), r, base)
			return ok, err
		})
		if wins != 1 {
			t.Errorf("got %d created; want 1", wins)
		}
	})
}

// RunModeChecks checks the engine's two cheaper modes on a store that
// implements lambdakit.ItemStore and lambdakit.Committer: the record on
// the business item (ReadableIDs, SetItem, NeverExpire), with its lock,
// and StagedOnly, without. item builds the store's item from string
// attributes (for dynamostore, a map of types.AttributeValueMemberS).
func RunModeChecks(t *testing.T, newStore func(t *testing.T) lambdakit.Store, item func(attrs map[string]string) any) {
	quiet := func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) }
	onItem := func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.TTL = "payment", true, lambdakit.NeverExpire
	}
	stagedOnly := func(o *lambdakit.Options) { onItem(o); o.StagedOnly = true }
	ctxFor := func(t *testing.T) context.Context {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	for _, mode := range []struct {
		name string
		opts func(*lambdakit.Options)
	}{{"record on the item", onItem}, {"StagedOnly", stagedOnly}} {
		t.Run(mode.name, func(t *testing.T) {
			key := func(t *testing.T, k string) string { return strings.ReplaceAll(t.Name(), "/", "_") + "_" + k }
			t.Run("a duplicate replays the first result, under the readable ID, forever", func(t *testing.T) {
				s := newStore(t)
				e := lambdakit.NewOnce(s, quiet, mode.opts)
				var runs atomic.Int32
				fn := func(ctx context.Context) ([]byte, error) {
					n := runs.Add(1)
					if err := lambdakit.SetItem(ctx, item(map[string]string{"amount": fmt.Sprint(n)})); err != nil {
						return nil, err
					}
					return []byte(fmt.Sprintf(`{"run":%d}`, n)), nil
				}
				k := key(t, "pay_1")
				for i := range 3 {
					got, err := e.Do(ctxFor(t), k, []byte(`{"amount":10}`), fn)
					if err != nil || string(got) != `{"run":1}` {
						t.Fatalf("call %d: got %s, %v; want the first result", i+1, got, err)
					}
				}
				if getter, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s); ok {
					recs, err := getter.GetRecords(ctxFor(t), []string{"payment#" + k})
					if err != nil {
						t.Fatal(err)
					}
					if r := recs["payment#"+k]; r.Status != lambdakit.StatusCompleted || !r.Expiration.IsZero() {
						t.Errorf("record payment#%s: got %+v; want completed, with no expiration", k, r)
					}
				}
				if _, err := e.Do(ctxFor(t), k, []byte(`{"amount":11}`), fn); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
					t.Errorf("another payload: got %v; want ErrPayloadMismatch", err)
				}
			})
			t.Run("an error leaves the key free for the retry", func(t *testing.T) {
				e := lambdakit.NewOnce(newStore(t), quiet, mode.opts)
				fail := errors.New("declined")
				k := key(t, "pay_2")
				if _, err := e.Do(ctxFor(t), k, nil, func(ctx context.Context) ([]byte, error) {
					_ = lambdakit.SetItem(ctx, item(map[string]string{"amount": "1"}))
					return nil, fail
				}); !errors.Is(err, fail) {
					t.Fatalf("got %v; want the handler's error", err)
				}
				got, err := e.Do(ctxFor(t), k, nil, func(context.Context) ([]byte, error) { return []byte(`"second"`), nil })
				if err != nil || string(got) != `"second"` {
					t.Errorf("retry: got %s, %v; want it run", got, err)
				}
			})
			t.Run("ten concurrent calls with one key commit once", func(t *testing.T) {
				s := newStore(t)
				var runs atomic.Int32
				var wg sync.WaitGroup
				results := make(chan string, 10)
				errs := make(chan error, 10)
				k := key(t, "pay_3")
				for range 10 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// An engine each: ten containers.
						e := lambdakit.NewOnce(s, quiet, mode.opts)
						got, err := e.Do(ctxFor(t), k, []byte(`{}`), func(context.Context) ([]byte, error) {
							return []byte(fmt.Sprintf(`{"run":%d}`, runs.Add(1))), nil
						})
						if err != nil && !errors.Is(err, lambdakit.ErrInProgress) {
							errs <- err
						}
						if err == nil {
							results <- string(got)
						}
					}()
				}
				wg.Wait()
				close(results)
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				first := ""
				for r := range results {
					if first == "" {
						first = r
					}
					if r != first {
						t.Errorf("results differ: %s and %s; want every call to get the one committed", first, r)
					}
				}
				if first == "" {
					t.Error("no call succeeded")
				}
			})
			t.Run("SetItem refuses misuse", func(t *testing.T) {
				e := lambdakit.NewOnce(newStore(t), quiet, mode.opts)
				if err := lambdakit.SetItem(ctxFor(t), item(map[string]string{"a": "1"})); !errors.Is(err, lambdakit.ErrNotStaging) {
					t.Errorf("outside Do: got %v; want ErrNotStaging", err)
				}
				var twice, clash error
				_, err := e.Do(ctxFor(t), key(t, "pay_4"), nil, func(ctx context.Context) ([]byte, error) {
					clash = lambdakit.SetItem(ctx, item(map[string]string{"status": "paid"}))
					if err := lambdakit.SetItem(ctx, item(map[string]string{"a": "1"})); err != nil {
						return nil, err
					}
					twice = lambdakit.SetItem(ctx, item(map[string]string{"b": "2"}))
					return nil, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !errors.Is(clash, lambdakit.ErrInvalidItem) {
					t.Errorf("an attribute of the record's own: got %v; want ErrInvalidItem", clash)
				}
				if !errors.Is(twice, lambdakit.ErrItemAlreadySet) {
					t.Errorf("a second SetItem: got %v; want ErrItemAlreadySet", twice)
				}
			})
			t.Run("a key too long for a DynamoDB key is ErrInvalidKey", func(t *testing.T) {
				e := lambdakit.NewOnce(newStore(t), quiet, mode.opts)
				ran := false
				_, err := e.Do(ctxFor(t), strings.Repeat("k", 2048), nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
				if !errors.Is(err, lambdakit.ErrInvalidKey) || ran {
					t.Errorf("got %v, ran=%v; want ErrInvalidKey, not run", err, ran)
				}
			})
		})
	}
}
