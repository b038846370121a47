package lambdakittest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// After the crash, nothing the process sends changes the store, and it
// starts nothing new.
func TestCrashStoreLosesEveryWriteAfterTheCrash(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	s := lambdakittest.NewCrashStore(mem)
	now := time.Now()
	rec := lambdakit.IdempotencyRecord{ID: "p#1", Status: lambdakit.StatusInProgress, Lease: "l1",
		InProgressExpiration: now.Add(time.Minute), Expiration: now.Add(time.Hour)}
	if _, ok, err := s.Acquire(t.Context(), rec, now); !ok || err != nil {
		t.Fatalf("acquire before the crash: %v, %v", ok, err)
	}
	s.Crash()
	done := rec
	done.Status = lambdakit.StatusCompleted
	for name, err := range map[string]error{
		"complete":    s.Complete(t.Context(), done),
		"mark effect": s.MarkEffect(t.Context(), rec.ID, rec.Lease, "charge ch_1"),
		"release":     s.Release(t.Context(), rec.ID, rec.Lease),
	} {
		if err != nil {
			t.Errorf("%s after the crash: %v; want it lost without a word", name, err)
		}
	}
	if got := mem.Records()[rec.ID]; got.Status != lambdakit.StatusInProgress || got.Effect != "" {
		t.Errorf("record after the crash: %+v; want it in progress as the process left it", got)
	}
	other := rec
	other.ID = "p#2"
	if _, _, err := s.Acquire(t.Context(), other, now); !errors.Is(err, lambdakittest.ErrCrashed) {
		t.Errorf("acquire after the crash: %v; want ErrCrashed", err)
	}
	if c := mem.Calls(); c.Acquire != 1 || c.Complete != 0 || c.Release != 0 {
		t.Errorf("the wrapped store got %+v; want the one acquire before the crash", c)
	}
}

// unwrapping is a store wrapper of the kind lambdakitotel.WrapStore
// returns: Store's methods and Unwrap, the capabilities left below it.
type unwrapping struct{ lambdakit.Store }

func (w unwrapping) Unwrap() lambdakit.Store { return w.Store }

// Over a wrapper (lambdakit.StoreWrapper), the crash store passes on what
// the store below it can do, as the engine would find it.
func TestCrashStorePassesOnTheCapabilitiesBelowAWrapper(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	s := lambdakittest.NewCrashStore(unwrapping{mem})
	now := time.Now()
	rec := lambdakit.IdempotencyRecord{ID: "p#1", Status: lambdakit.StatusInProgress, Lease: "l1",
		InProgressExpiration: now.Add(time.Minute), Expiration: now.Add(time.Hour)}
	if _, ok, err := s.Acquire(t.Context(), rec, now); !ok || err != nil {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	if err := s.MarkEffect(t.Context(), rec.ID, rec.Lease, "charge ch_1"); err != nil {
		t.Errorf("mark effect: %v; want the memory store's mark", err)
	}
	if err := s.CheckItem(map[string]any{"amount": 1}); err != nil {
		t.Errorf("check item: %v; want the memory store's item accepted", err)
	}
	got, err := s.GetRecords(t.Context(), []string{rec.ID})
	if err != nil || got[rec.ID].Effect != "charge ch_1" {
		t.Errorf("get records: %+v, %v; want the record with its effect", got, err)
	}
}

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := lambdakittest.NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %v; want %v", c.Now(), start)
	}
	c.Advance(90 * time.Second)
	if want := start.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Errorf("after Advance, Now = %v; want %v", c.Now(), want)
	}
}

// limiting is a store that holds record IDs of at most max bytes.
type limiting struct {
	*lambdakittest.MemoryStore
	max int
}

func (l limiting) MaxIDBytes() int { return l.max }

// The crash store passes on the wrapped store's limit on record IDs, and
// shows none when the wrapped store has none.
func TestCrashStorePassesOnTheIDLimitOfItsStore(t *testing.T) {
	l, ok := lambdakit.StoreAs[lambdakit.IDLimiter](lambdakittest.NewCrashStore(limiting{&lambdakittest.MemoryStore{}, 40}))
	if !ok || l.MaxIDBytes() != 40 {
		t.Errorf("IDLimiter through CrashStore: %v; want the store's 40 bytes", ok)
	}
	if _, ok := lambdakit.StoreAs[lambdakit.IDLimiter](lambdakittest.NewCrashStore(&lambdakittest.MemoryStore{})); ok {
		t.Error("IDLimiter through CrashStore over a MemoryStore; want none, as the store has none")
	}
	if _, ok := lambdakit.StoreAs[lambdakit.Committer](lambdakittest.NewCrashStore(&lambdakittest.MemoryStore{})); ok {
		t.Error("Committer through CrashStore; want none: no crash would stop it")
	}
}

// noItems is a store with a staging check that writes no item, as
// valkeystore.Store: it is a StagingChecker that is no ItemStore, and
// refuses every staged write. (Its record methods are a MemoryStore's,
// behind lambdakit.Store, which hides the rest.)
type noItems struct{ lambdakit.Store }

func (noItems) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	if len(rec.Staged) > 0 {
		return fmt.Errorf("%w: no staged writes here", lambdakit.ErrStagingUnsupported)
	}
	return nil
}

// Over a store whose staging check does not check items (one that writes
// none), the crash store still refuses at SetItem an item its CheckItem
// refuses: the engine leaves that check to the crash store's
// CheckStaging.
func TestCrashStoreRefusesAtSetItemAnItemTheStoreBelowCannotWrite(t *testing.T) {
	s := lambdakittest.NewCrashStore(noItems{&lambdakittest.MemoryStore{}})
	if err := s.CheckItem(map[string]any{"amount": 1}); !errors.Is(err, lambdakit.ErrInvalidItem) {
		t.Fatalf("CheckItem: %v; want ErrInvalidItem, the store below writing no item", err)
	}
	e := lambdakit.NewOnce(s, func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) })
	var setErr error
	_, _ = e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
		setErr = lambdakit.SetItem(ctx, map[string]any{"amount": 1})
		return nil, setErr
	})
	if !errors.Is(setErr, lambdakit.ErrInvalidItem) {
		t.Errorf("SetItem: got %v; want ErrInvalidItem, as CheckItem", setErr)
	}
}
