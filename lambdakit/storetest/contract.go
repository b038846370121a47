package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

var contractSeq atomic.Uint64

// RunStoreContract checks that a Store meets the contract lambdakit relies
// on. newStore returns the store under test; it may return the same store
// every time, since each check uses IDs of its own. Times are synthetic and
// passed to Acquire, so the checks do not sleep.
func RunStoreContract(t *testing.T, newStore func(t *testing.T) lambdakit.Store) {
	// Whole seconds, so that round trips through a store that keeps
	// seconds and milliseconds compare exactly.
	base := time.Now().Truncate(time.Second)

	newRecord := func(t *testing.T, leaseEnd time.Time) lambdakit.IdempotencyRecord {
		return lambdakit.IdempotencyRecord{
			ID:                   fmt.Sprintf("contract#%s#%d", t.Name(), contractSeq.Add(1)),
			Status:               lambdakit.StatusInProgress,
			Expiration:           base.Add(time.Hour),
			InProgressExpiration: leaseEnd,
			Validation:           "v1",
			Lease:                fmt.Sprintf("lease-%d", contractSeq.Add(1)),
		}
	}
	acquire := func(t *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool) {
		t.Helper()
		old, ok, err := s.Acquire(t.Context(), rec, now)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", rec.ID, err)
		}
		return old, ok
	}
	mustAcquire := func(t *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord, now time.Time) {
		t.Helper()
		// A put that landed but whose answer was lost (a busy local
		// server) is sent again by the client and finds its own record:
		// held all the same, as the engine counts it.
		if old, ok := acquire(t, s, rec, now); !ok && (old.Lease != rec.Lease || old.Status != lambdakit.StatusInProgress) {
			t.Fatalf("Acquire(%s) = not acquired, held by %+v; want acquired", rec.ID, old)
		}
	}
	other := func(rec lambdakit.IdempotencyRecord, lease string, leaseEnd time.Time) lambdakit.IdempotencyRecord {
		rec.Lease = lease
		rec.InProgressExpiration = leaseEnd
		return rec
	}
	complete := func(t *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord, data []byte) lambdakit.IdempotencyRecord {
		t.Helper()
		rec.Status = lambdakit.StatusCompleted
		rec.Data = data
		if err := s.Complete(t.Context(), rec); err != nil {
			t.Fatalf("Complete(%s): %v", rec.ID, err)
		}
		return rec
	}

	t.Run("new key is acquired", func(t *testing.T) {
		s := newStore(t)
		mustAcquire(t, s, newRecord(t, base.Add(time.Minute)), base)
	})

	// lambdakit.NeverExpire: a record completed with a zero Expiration
	// is kept forever, never taken for expired.
	t.Run("completed without an expiration is kept forever", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		rec.Expiration = time.Time{}
		complete(t, s, rec, []byte(`"kept"`))
		later := base.Add(10 * 365 * 24 * time.Hour)
		old, ok := acquire(t, s, other(rec, "late", later.Add(time.Minute)), later)
		if ok {
			t.Fatal("Acquire ten years after a completion kept forever = acquired; want the completed record")
		}
		if old.Status != lambdakit.StatusCompleted || !bytes.Equal(old.Data, []byte(`"kept"`)) || !old.Expiration.IsZero() {
			t.Errorf("got %+v; want completed, its result, no expiration", old)
		}
	})

	t.Run("completed key returns the record with its result", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		complete(t, s, rec, []byte(`{"charge_id":"ch_1"}`))
		old, ok := acquire(t, s, other(rec, "late", base.Add(2*time.Minute)), base.Add(time.Second))
		if ok {
			t.Fatal("Acquire of a completed key = acquired; want the completed record")
		}
		if old.Status != lambdakit.StatusCompleted || !bytes.Equal(old.Data, []byte(`{"charge_id":"ch_1"}`)) || old.Validation != "v1" || old.ID != rec.ID {
			t.Errorf("got %+v; want completed with data and validation v1", old)
		}
		if !old.Expiration.Equal(rec.Expiration) {
			t.Errorf("got expiration %v; want %v (seconds precision)", old.Expiration, rec.Expiration)
		}
	})

	t.Run("completed key without result returns nil data", func(t *testing.T) {
		// An empty result ([]byte{}) is no result too: a store that kept
		// it would have its duplicates counted as replayed where another
		// store's are counted as skipped.
		for name, data := range map[string][]byte{"nil": nil, "empty": {}} {
			s := newStore(t)
			rec := newRecord(t, base.Add(time.Minute))
			mustAcquire(t, s, rec, base)
			complete(t, s, rec, data)
			old, ok := acquire(t, s, other(rec, "late", base.Add(2*time.Minute)), base)
			if ok || old.Status != lambdakit.StatusCompleted || old.Data != nil {
				t.Errorf("%s result: got %+v (data nil: %v), acquired=%v; want completed with nil data", name, old, old.Data == nil, ok)
			}
		}
	})

	t.Run("completed key with a failure returns it, and no result", func(t *testing.T) {
		// What the engine writes when a completion was rejected after the
		// work ran: duplicates must see the failure, or they would count
		// the work as done with no result.
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		rec.Failure = "staged write rejected"
		complete(t, s, rec, nil)
		old, ok := acquire(t, s, other(rec, "late", base.Add(2*time.Minute)), base)
		if ok || old.Status != lambdakit.StatusCompleted || old.Failure != "staged write rejected" || old.Data != nil {
			t.Errorf("got %+v, acquired=%v; want completed with the failure and no data", old, ok)
		}
		if getter, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s); ok {
			got, err := getter.GetRecords(t.Context(), []string{rec.ID})
			if err != nil {
				t.Fatal(err)
			}
			if got[rec.ID].Failure != "staged write rejected" {
				t.Errorf("GetRecords: got %+v; want the failure", got[rec.ID])
			}
		}
	})

	t.Run("an in-progress record with its effect kept is never taken over", func(t *testing.T) {
		// Options.StoreEffect: an owner that stopped after its effect
		// leaves a record no other owner may run again, until it expires.
		s := newStore(t)
		m, ok := lambdakit.StoreAs[lambdakit.EffectMarker](s)
		if !ok {
			t.Skipf("%T does not implement lambdakit.EffectMarker", s)
		}
		leaseEnd := base.Add(time.Second)
		rec := newRecord(t, leaseEnd)
		mustAcquire(t, s, rec, base)
		if err := m.MarkEffect(t.Context(), rec.ID, "not-the-lease", "charge ch_1"); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("MarkEffect under another lease: got %v; want ErrLeaseLost", err)
		}
		if err := m.MarkEffect(t.Context(), rec.ID, rec.Lease, "charge ch_1"); err != nil {
			t.Fatalf("MarkEffect: %v", err)
		}
		old, ok := acquire(t, s, other(rec, "taker", base.Add(time.Minute)), leaseEnd.Add(time.Second))
		if ok || old.Status != lambdakit.StatusInProgress || old.Effect != "charge ch_1" || old.Lease != rec.Lease {
			t.Errorf("after the lease: got %+v, acquired=%v; want the record with its effect, not taken over", old, ok)
		}
		if _, ok := acquire(t, s, other(rec, "late", base.Add(3*time.Hour)), base.Add(2*time.Hour)); !ok {
			t.Error("after its expiration: not acquired; want the record to count as absent")
		}
		done := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, done, base)
		complete(t, s, done, nil)
		if err := m.MarkEffect(t.Context(), done.ID, done.Lease, "charge ch_2"); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("MarkEffect on a completed record: got %v; want ErrLeaseLost", err)
		}
	})

	t.Run("completed key keeps its effect, with and without a failure", func(t *testing.T) {
		// What the engine writes after the handler declared its effect
		// (lambdakit.EffectDone): a duplicate, and whoever reconciles,
		// must see what was done.
		for name, failure := range map[string]string{"failed": "lambdakit: failed after its effect: reconcile", "done": ""} {
			s := newStore(t)
			rec := newRecord(t, base.Add(time.Minute))
			mustAcquire(t, s, rec, base)
			rec.Failure, rec.Effect = failure, "charge ch_Zoë 42"
			complete(t, s, rec, nil)
			old, ok := acquire(t, s, other(rec, "late", base.Add(2*time.Minute)), base)
			if ok || old.Effect != rec.Effect || old.Failure != failure {
				t.Errorf("%s: got %+v, acquired=%v; want effect %q and failure %q", name, old, ok, rec.Effect, failure)
			}
			if getter, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s); ok {
				got, err := getter.GetRecords(t.Context(), []string{rec.ID})
				if err != nil {
					t.Fatal(err)
				}
				if got[rec.ID].Effect != rec.Effect {
					t.Errorf("%s: GetRecords: got %+v; want effect %q", name, got[rec.ID], rec.Effect)
				}
			}
		}
	})

	t.Run("in-progress key is refused with the owner's record", func(t *testing.T) {
		s := newStore(t)
		leaseEnd := base.Add(1500 * time.Millisecond)
		rec := newRecord(t, leaseEnd)
		mustAcquire(t, s, rec, base)
		old, ok := acquire(t, s, other(rec, "second", base.Add(time.Minute)), base.Add(time.Second))
		if ok {
			t.Fatal("second Acquire while in progress = acquired; want refused")
		}
		if old.Status != lambdakit.StatusInProgress || old.Lease != rec.Lease || old.Validation != "v1" {
			t.Errorf("got %+v; want in progress under the first lease", old)
		}
		if !old.InProgressExpiration.Equal(leaseEnd) {
			t.Errorf("got lease end %v; want %v (milliseconds precision)", old.InProgressExpiration, leaseEnd)
		}
	})

	t.Run("expired lease is taken over", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Second))
		mustAcquire(t, s, rec, base)
		mustAcquire(t, s, other(rec, "taker", base.Add(time.Minute)), base.Add(2*time.Second))
	})

	// A lease ending at x.9 s must hold at x.1 s and until x.9 s exactly,
	// in every store: a store that keeps whole seconds must not round the
	// lease's end down (a second owner would run while the first still
	// may), and one that keeps more precision must agree with it to the
	// millisecond. Here the record's expiration ends with its lease, as it
	// does when the TTL is shorter than the time left in the invocation.
	t.Run("lease ending at x.9 s is held until x.9 s, to the millisecond", func(t *testing.T) {
		s := newStore(t)
		end := base.Add(900 * time.Millisecond)
		rec := newRecord(t, end)
		rec.Expiration = end
		mustAcquire(t, s, rec, base)
		for _, at := range []time.Duration{100 * time.Millisecond, 899 * time.Millisecond} {
			if old, ok := acquire(t, s, other(rec, fmt.Sprintf("early-%v", at), base.Add(time.Minute)), base.Add(at)); ok {
				t.Fatalf("Acquire at +%v = acquired; want refused: the lease ends at +900ms", at)
			} else if old.Lease != rec.Lease {
				t.Errorf("at +%v: got holder %q; want %q", at, old.Lease, rec.Lease)
			}
		}
		mustAcquire(t, s, other(rec, "on-time", base.Add(time.Minute)), end)
	})

	// Expiration is kept in whole seconds (the table's TTL attribute), so a
	// store rounds it up, never down: a completed record whose expiration
	// is asked for x.9 s counts until x+1 s in every store alike.
	t.Run("completed record expiring at x.9 s counts until x+1 s", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(100*time.Millisecond))
		rec.Expiration = base.Add(900 * time.Millisecond)
		mustAcquire(t, s, rec, base)
		complete(t, s, rec, []byte(`"done"`))
		for _, at := range []time.Duration{100 * time.Millisecond, 900 * time.Millisecond, 999 * time.Millisecond} {
			old, ok := acquire(t, s, other(rec, fmt.Sprintf("late-%v", at), base.Add(time.Minute)), base.Add(at))
			if ok || old.Status != lambdakit.StatusCompleted {
				t.Fatalf("Acquire at +%v: got %+v, acquired=%v; want the completed record", at, old, ok)
			}
			if want := base.Add(time.Second); !old.Expiration.Equal(want) {
				t.Errorf("at +%v: got expiration %v; want %v (rounded up to the second)", at, old.Expiration, want)
			}
		}
		mustAcquire(t, s, other(rec, "after", base.Add(time.Minute)), base.Add(time.Second))
	})

	t.Run("expired completed record counts as absent", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Second))
		rec.Expiration = base.Add(10 * time.Second)
		mustAcquire(t, s, rec, base)
		complete(t, s, rec, []byte(`"old"`))
		next := other(rec, "next", base.Add(time.Minute))
		next.Expiration = base.Add(time.Hour)
		mustAcquire(t, s, next, base.Add(11*time.Second))
	})

	t.Run("stored validation is returned for the payload check", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		complete(t, s, rec, nil)
		changed := other(rec, "changed", base.Add(time.Minute))
		changed.Validation = "v2"
		old, ok := acquire(t, s, changed, base)
		if ok || old.Validation != "v1" {
			t.Errorf("got validation %q, acquired=%v; want v1 and refused", old.Validation, ok)
		}
	})

	t.Run("released key is acquired again at once", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		if err := s.Release(t.Context(), rec.ID, rec.Lease); err != nil {
			t.Fatalf("Release: %v", err)
		}
		mustAcquire(t, s, other(rec, "retry", base.Add(time.Minute)), base)
	})

	t.Run("stale owner cannot complete or release after takeover", func(t *testing.T) {
		s := newStore(t)
		stale := newRecord(t, base.Add(time.Second))
		mustAcquire(t, s, stale, base)
		owner := other(stale, "new-owner", base.Add(time.Minute))
		mustAcquire(t, s, owner, base.Add(2*time.Second))

		done := stale
		done.Status = lambdakit.StatusCompleted
		done.Data = []byte(`"stale"`)
		if err := s.Complete(t.Context(), done); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("stale Complete: got %v; want ErrLeaseLost", err)
		}
		if err := s.Release(t.Context(), stale.ID, stale.Lease); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("stale Release: got %v; want ErrLeaseLost", err)
		}
		old, ok := acquire(t, s, other(stale, "third", base.Add(time.Minute)), base.Add(3*time.Second))
		if ok || old.Lease != "new-owner" || old.Status != lambdakit.StatusInProgress {
			t.Errorf("got %+v, acquired=%v; want the new owner's record untouched", old, ok)
		}
	})

	t.Run("completed record is not released", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		complete(t, s, rec, nil)
		if err := s.Release(t.Context(), rec.ID, rec.Lease); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("Release of completed record: got %v; want ErrLeaseLost", err)
		}
		if _, ok := acquire(t, s, other(rec, "x", base.Add(time.Minute)), base); ok {
			t.Error("record was released after completion; want it kept")
		}
	})

	t.Run("release of a missing record succeeds", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		if err := s.Release(t.Context(), rec.ID, rec.Lease); err != nil {
			t.Errorf("got %v; want nil: nothing holds the key", err)
		}
		mustAcquire(t, s, rec, base)
		if err := s.Release(t.Context(), rec.ID, rec.Lease); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), rec.ID, rec.Lease); err != nil {
			t.Errorf("second Release: got %v; want nil", err)
		}
	})

	t.Run("retried acquire returns the caller's own record", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, rec, base)
		old, ok := acquire(t, s, rec, base)
		if ok || old.Lease != rec.Lease || old.Status != lambdakit.StatusInProgress {
			t.Errorf("got %+v, acquired=%v; want the record with the caller's lease", old, ok)
		}
	})

	t.Run("complete of an unknown record is refused", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		rec.Status = lambdakit.StatusCompleted
		if err := s.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("got %v; want ErrLeaseLost", err)
		}
	})

	t.Run("GetRecords returns what is stored and leaves out what is not", func(t *testing.T) {
		s := newStore(t)
		getter, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s)
		if !ok {
			t.Skip("the store does not implement lambdakit.BatchGetter")
		}
		done := newRecord(t, base.Add(time.Minute))
		mustAcquire(t, s, done, base)
		done = complete(t, s, done, []byte(`"r"`))
		busy := newRecord(t, base.Add(1500*time.Millisecond))
		mustAcquire(t, s, busy, base)
		missing := newRecord(t, base.Add(time.Minute))
		got, err := getter.GetRecords(t.Context(), []string{done.ID, busy.ID, missing.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Errorf("got %d records; want 2 (the missing one left out)", len(got))
		}
		if r := got[done.ID]; r.Status != lambdakit.StatusCompleted || string(r.Data) != `"r"` || r.Validation != "v1" || !r.Expiration.Equal(done.Expiration) {
			t.Errorf("completed record: got %+v", r)
		}
		if r := got[busy.ID]; r.Status != lambdakit.StatusInProgress || r.Lease != busy.Lease || !r.InProgressExpiration.Equal(busy.InProgressExpiration) {
			t.Errorf("in-progress record: got %+v", r)
		}
	})

	t.Run("20 concurrent acquires of one key: exactly one wins", func(t *testing.T) {
		s := newStore(t)
		rec := newRecord(t, base.Add(time.Minute))
		wins := race(t, 20, "Acquire", func(i int) (bool, error) {
			_, ok, err := s.Acquire(t.Context(), other(rec, fmt.Sprintf("g%d", i), rec.InProgressExpiration), base)
			return ok, err
		})
		if wins != 1 {
			t.Errorf("got %d winners; want 1", wins)
		}
	})
}

// race runs try(0) to try(n-1) at once, reports their errors as op's,
// and returns how many won.
func race(t *testing.T, n int, op string, try func(i int) (won bool, err error)) int {
	t.Helper()
	var wg sync.WaitGroup
	var wins atomic.Int32
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := try(i)
			if err != nil {
				errs <- err
			}
			if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%s: %v", op, err)
	}
	return int(wins.Load())
}

// PutFunc writes rec to the store s exactly as given, with no condition:
// the fields that are zero (a Status of "" included) are left out of the
// stored item. It stands for code other than lambdakit writing under a
// record's ID: another runtime, an operator, a business item under
// lambdakit.Options.ReadableIDs.
type PutFunc func(t *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord)

// RunUnknownStatusContract checks what a store and the engine do with an
// item under a record's ID whose status is not a record status
// (lambdakit.IdempotencyStatus.Known), expired or not: Acquire (and
// Commit, when the store is a lambdakit.Committer) never replaces it and
// returns it as it is; Once.Do fails with a *lambdakit.NotARecordError that
// names the ID and the status, without running its function (with
// StagedOnly, which runs it first, without applying its writes); the item
// is left as it was. put writes such items (see PutFunc).
func RunUnknownStatusContract(t *testing.T, newStore func(t *testing.T) lambdakit.Store, put PutFunc) {
	base := time.Now().Truncate(time.Second)
	// The lease and every time of the item are over: only its status
	// keeps it from being taken for an expired record.
	item := func(id string, status lambdakit.IdempotencyStatus, expired bool) lambdakit.IdempotencyRecord {
		exp := base.Add(time.Hour)
		if expired {
			exp = base.Add(-time.Hour)
		}
		return lambdakit.IdempotencyRecord{ID: id, Status: status, Expiration: exp,
			InProgressExpiration: base.Add(-time.Hour), Lease: "other-code", Validation: "v0", Data: []byte(`"theirs"`)}
	}
	// unchanged checks that the item under want.ID is still want, as a
	// refused Acquire returns it.
	unchanged := func(t *testing.T, s lambdakit.Store, want lambdakit.IdempotencyRecord) {
		t.Helper()
		lock := lambdakit.IdempotencyRecord{ID: want.ID, Status: lambdakit.StatusInProgress, Expiration: base.Add(time.Hour),
			InProgressExpiration: base.Add(time.Minute), Lease: fmt.Sprintf("check-%d", contractSeq.Add(1))}
		got, acquired, err := s.Acquire(t.Context(), lock, base)
		switch {
		case err != nil:
			t.Fatalf("Acquire(%s): %v", want.ID, err)
		case acquired:
			t.Fatalf("Acquire(%s) over an item with status %q = acquired; want the item returned, not replaced", want.ID, want.Status)
		case got.Status != want.Status || got.Lease != want.Lease || string(got.Data) != string(want.Data) || !got.Expiration.Equal(want.Expiration):
			t.Errorf("Acquire(%s) returned %+v; want the item as it was written, %+v", want.ID, got, want)
		}
	}
	for _, status := range []lambdakit.IdempotencyStatus{"CANCELLED", "inprogress", ""} {
		for _, expired := range []bool{false, true} {
			name := fmt.Sprintf("status %q, expired %v", status, expired)
			t.Run(name+": the stores never replace it", func(t *testing.T) {
				s := newStore(t)
				rec := item(fmt.Sprintf("unknown#%s#%d", t.Name(), contractSeq.Add(1)), status, expired)
				put(t, s, rec)
				unchanged(t, s, rec)
				if c, ok := lambdakit.StoreAs[lambdakit.Committer](s); ok {
					done := lambdakit.IdempotencyRecord{ID: rec.ID, Status: lambdakit.StatusCompleted, Expiration: base.Add(time.Hour),
						Lease: "committer", Data: []byte(`"ours"`)}
					if _, created, err := c.Commit(t.Context(), done, base); err != nil || created {
						t.Errorf("Commit over the item = created %v, %v; want the item returned, not replaced", created, err)
					}
				}
				unchanged(t, s, rec)
			})
			t.Run(name+": the engine fails with NotARecordError and runs nothing", func(t *testing.T) {
				s := newStore(t)
				modes := map[string]func(*lambdakit.Options){"two-step": func(*lambdakit.Options) {}}
				if _, ok := lambdakit.StoreAs[lambdakit.Committer](s); ok {
					modes["StagedOnly"] = func(o *lambdakit.Options) { o.StagedOnly = true }
				}
				for mode, opt := range modes {
					key := fmt.Sprintf("%s-%d", mode, contractSeq.Add(1))
					rec := item("unknown#"+key, status, expired)
					put(t, s, rec)
					e := lambdakit.NewOnce(s, opt, func(o *lambdakit.Options) {
						o.Prefix, o.ReadableIDs = "unknown", true
						o.Logger = slog.New(slog.DiscardHandler)
					})
					ran := false
					_, err := e.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { ran = true; return []byte(`"ours"`), nil })
					var nar *lambdakit.NotARecordError
					if !errors.As(err, &nar) || !errors.Is(err, lambdakit.ErrNotARecord) || nar.ID != rec.ID || nar.Status != status {
						t.Errorf("%s: Do = %v; want a *NotARecordError for %s with status %q", mode, err, rec.ID, status)
					}
					// StagedOnly runs the function before any request, by
					// design; its writes are what must not land.
					if ran && mode != "StagedOnly" {
						t.Errorf("%s: the function ran; want it not run", mode)
					}
					unchanged(t, s, rec)
				}
			})
		}
	}
}
