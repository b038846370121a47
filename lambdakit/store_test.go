package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// wrapper is a store wrapper of the simplest kind: the three Store methods
// of what it wraps, and Unwrap.
type wrapper struct{ lambdakit.Store }

func (w wrapper) Unwrap() lambdakit.Store { return w.Store }

// checkingStore is a MemoryStore with the two capabilities it lacks: an ID
// limit, and a staging check that refuses an item with a "big" attribute,
// and, as a StagingChecker that is an ItemStore must, one CheckItem
// refuses.
type checkingStore struct{ *lambdakittest.MemoryStore }

func (checkingStore) MaxIDBytes() int { return 16 }

func (s checkingStore) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	if rec.Item == nil {
		return nil
	}
	if err := s.CheckItem(rec.Item); err != nil {
		return err
	}
	if m, _ := rec.Item.(map[string]any); m["big"] != nil {
		return fmt.Errorf("%w: the item's big attribute", lambdakit.ErrStagedTooLarge)
	}
	return nil
}

// storeAsFinds reports whether StoreAs finds a T in s.
func storeAsFinds[T any](s lambdakit.Store) bool {
	_, ok := lambdakit.StoreAs[T](s)
	return ok
}

func TestStoreAsLooksThroughWrappers(t *testing.T) {
	store := wrapper{wrapper{checkingStore{&lambdakittest.MemoryStore{}}}}
	for name, found := range map[string]bool{
		"BatchGetter":    storeAsFinds[lambdakit.BatchGetter](store),
		"ItemStore":      storeAsFinds[lambdakit.ItemStore](store),
		"StagingChecker": storeAsFinds[lambdakit.StagingChecker](store),
		"Committer":      storeAsFinds[lambdakit.Committer](store),
		"EffectMarker":   storeAsFinds[lambdakit.EffectMarker](store),
		"IDLimiter":      storeAsFinds[lambdakit.IDLimiter](store),
	} {
		if !found {
			t.Errorf("StoreAs[%s] of a wrapper of a wrapper found none; want the wrapped store's", name)
		}
	}
	// Nothing is invented: plainStore is no wrapper, and hides the rest.
	if storeAsFinds[lambdakit.Committer](wrapper{plainStore{&lambdakittest.MemoryStore{}}}) {
		t.Error("StoreAs found a Committer below a store that hides it")
	}
}

// A stack of 64 wrappers (the most StoreAs looks through) is a chain that
// ends: StoreAs still reaches the store below the 64th, and NewOnce starts.
func TestStoreAsLooksThroughSixtyFourWrappers(t *testing.T) {
	var store lambdakit.Store = checkingStore{&lambdakittest.MemoryStore{}}
	for range 64 {
		store = wrapper{store}
	}
	var found bool
	for name, call := range map[string]func(){
		"StoreAs": func() { _, found = lambdakit.StoreAs[lambdakit.IDLimiter](store) },
		"NewOnce": func() { lambdakit.NewOnce(store) },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s below 64 wrappers panicked: %v; want a chain that ends", name, p)
				}
			}()
			call()
		}()
	}
	if !found {
		t.Error("StoreAs[IDLimiter] below 64 wrappers found none; want the wrapped store's")
	}
}

// selfWrapper is a broken wrapper: its Unwrap returns itself, so the
// chain below it never ends.
type selfWrapper struct{ *lambdakittest.MemoryStore }

func (w *selfWrapper) Unwrap() lambdakit.Store { return w }

// A wrapper chain that never ends (a wrapper that unwraps to itself) is a
// configuration error, told as the function starts: StoreAs and NewOnce
// panic naming it, where they looped for ever.
func TestStoreAsPanicsOnAChainThatNeverEnds(t *testing.T) {
	store := wrapper{&selfWrapper{&lambdakittest.MemoryStore{}}}
	for name, call := range map[string]func(){
		"StoreAs": func() { lambdakit.StoreAs[lambdakit.IDLimiter](store) }, // MemoryStore has none
		"NewOnce": func() { lambdakit.NewOnce(store) },
	} {
		got := make(chan any, 1)
		go func() {
			defer func() { got <- recover() }()
			call()
		}()
		select {
		case p := <-got:
			if msg := fmt.Sprint(p); !strings.Contains(msg, "selfWrapper") {
				t.Errorf("%s panicked with %q; want a panic naming the wrapper that does not end its chain", name, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still running after 5s: it follows the chain for ever", name)
		}
	}
}

// The engine keeps every capability of a store under two wrappers: the
// item is written, the staging check refuses before the work, the ID limit
// holds, and the modes that need a capability start.
func TestEngineUsesTheCapabilitiesOfAWrappedStore(t *testing.T) {
	wrap := func(mem *lambdakittest.MemoryStore) lambdakit.Store { return wrapper{wrapper{checkingStore{mem}}} }
	quietOpt := func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) }

	t.Run("SetItem", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		e := lambdakit.NewOnce(wrap(mem), quietOpt, func(o *lambdakit.Options) { o.Prefix = "p" })
		if _, err := e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
			return nil, lambdakit.SetItem(ctx, map[string]any{"amount": 5})
		}); err != nil {
			t.Fatal(err)
		}
		if item, ok := mem.Item(lambdakit.RecordID("p", "k")); !ok || item["amount"] != 5 {
			t.Errorf("item %v, %v; want amount 5 written on the record", item, ok)
		}
	})

	t.Run("CheckStaging", func(t *testing.T) {
		e := lambdakit.NewOnce(wrap(&lambdakittest.MemoryStore{}), quietOpt)
		var setErr error
		_, _ = e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
			setErr = lambdakit.SetItem(ctx, map[string]any{"big": 1})
			return nil, setErr
		})
		if !errors.Is(setErr, lambdakit.ErrStagedTooLarge) {
			t.Errorf("SetItem: got %v; want ErrStagedTooLarge from the wrapped store's check", setErr)
		}
	})

	t.Run("IDLimiter", func(t *testing.T) {
		e := lambdakit.NewOnce(wrap(&lambdakittest.MemoryStore{}), quietOpt, func(o *lambdakit.Options) { o.ReadableIDs, o.Prefix = true, "p" })
		_, err := e.Do(t.Context(), strings.Repeat("k", 20), nil, func(context.Context) ([]byte, error) {
			t.Error("the work ran; want the key refused before it")
			return nil, nil
		})
		if !errors.Is(err, lambdakit.ErrInvalidKey) {
			t.Errorf("got %v; want ErrInvalidKey for an ID over the wrapped store's 16 bytes", err)
		}
	})

	t.Run("StagedOnly", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		e := lambdakit.NewOnce(wrap(mem), quietOpt, func(o *lambdakit.Options) { o.StagedOnly = true })
		if _, err := e.Do(t.Context(), "k", nil, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if c := mem.Calls(); c.Commit != 1 || c.Total() != 1 {
			t.Errorf("calls %+v; want one Commit, through the wrappers", c)
		}
	})

	t.Run("StoreEffect", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		e := lambdakit.NewOnce(wrap(mem), quietOpt, func(o *lambdakit.Options) { o.StoreEffect, o.Prefix = true, "p" })
		if _, err := e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
			lambdakit.EffectDone(ctx, "charged")
			if rec := mem.Records()[lambdakit.RecordID("p", "k")]; rec.Status != lambdakit.StatusInProgress || rec.Effect != "charged" {
				t.Errorf("record after EffectDone: %s with effect %q; want INPROGRESS with the effect kept", rec.Status, rec.Effect)
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// tenantItems is a wrapper that intercepts CheckItem, as StoreWrapper
// allows, to refuse an item without a "tenant" attribute, and otherwise
// passes the item to the wrapped store's CheckItem.
type tenantItems struct{ lambdakit.Store }

func (w tenantItems) Unwrap() lambdakit.Store { return w.Store }

func (w tenantItems) CheckItem(item any) error {
	if m, _ := item.(map[string]any); m["tenant"] == nil {
		return fmt.Errorf("%w: the item has no tenant", lambdakit.ErrInvalidItem)
	}
	is, ok := lambdakit.StoreAs[lambdakit.ItemStore](w.Store)
	if !ok {
		return fmt.Errorf("%w: %T writes no item", lambdakit.ErrInvalidItem, w.Store)
	}
	return is.CheckItem(item)
}

// SetItem makes the ItemStore's check of the item even when the
// StagingChecker the engine found is another store, further down the
// chain: that one's CheckStaging checks the item by its own CheckItem,
// not by the wrapper's.
func TestSetItemChecksTheItemWithTheItemStoreAboveTheStagingChecker(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(tenantItems{checkingStore{mem}}, func(o *lambdakit.Options) {
		o.Logger, o.Prefix = slog.New(slog.DiscardHandler), "p"
	})
	var setErr error
	_, _ = e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
		setErr = lambdakit.SetItem(ctx, map[string]any{"amount": 5})
		return nil, setErr
	})
	if !errors.Is(setErr, lambdakit.ErrInvalidItem) || !strings.Contains(fmt.Sprint(setErr), "no tenant") {
		t.Errorf("SetItem: got %v; want the wrapper's ErrInvalidItem for an item without a tenant", setErr)
	}
	if item, ok := mem.Item(lambdakit.RecordID("p", "k")); ok {
		t.Errorf("item %v written; want none", item)
	}
}

// recordingStore is a MemoryStore, with no staging check, that records
// IdempotencyRecord.Checked of each completion; checkedStore is one with
// checkingStore's staging check.
type recordingStore struct {
	*lambdakittest.MemoryStore
	checked []bool
}

func (s *recordingStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	s.checked = append(s.checked, rec.Checked)
	return s.MemoryStore.Complete(ctx, rec)
}

type checkedStore struct{ *recordingStore }

func (s checkedStore) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	return checkingStore{s.MemoryStore}.CheckStaging(rec)
}

// The engine marks a completion Checked only when the store's staging
// check passed what it stages: not without a StagingChecker, not when
// nothing was staged, and not for the failure a completion after the
// effect records in place of the item (whose failure text the check never
// saw).
func TestCompletionsAreCheckedOnlyWhenTheStagingCheckPassedTheirWrites(t *testing.T) {
	quiet := func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) }
	setItem := func(ctx context.Context) ([]byte, error) {
		return nil, lambdakit.SetItem(ctx, map[string]any{"a": 1})
	}
	for _, tc := range []struct {
		name    string
		checker bool
		fn      func(context.Context) ([]byte, error)
		want    []bool
	}{
		{"an item the check passed", true, setItem, []bool{true}},
		{"nothing staged", true, func(context.Context) ([]byte, error) { return []byte("r"), nil }, []bool{false}},
		{"a store without a staging check", false, setItem, []bool{false}},
		{"a failure after the effect", true, func(ctx context.Context) ([]byte, error) {
			if _, err := setItem(ctx); err != nil {
				return nil, err
			}
			lambdakit.EffectDone(ctx, "charged")
			return nil, errors.New("the ledger is down")
		}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &recordingStore{MemoryStore: &lambdakittest.MemoryStore{}}
			var store lambdakit.Store = s
			if tc.checker {
				store = checkedStore{s}
			}
			_, _ = lambdakit.NewOnce(store, quiet).Do(t.Context(), "k", nil, tc.fn)
			if fmt.Sprint(s.checked) != fmt.Sprint(tc.want) {
				t.Errorf("Checked of each completion %v; want %v", s.checked, tc.want)
			}
		})
	}
}
