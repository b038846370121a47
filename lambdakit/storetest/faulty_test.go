package storetest_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// bareStore is a store with Store's methods only, no capability.
type bareStore struct{ lambdakit.Store }

// has reports which optional capabilities StoreAs finds in s.
func has(s lambdakit.Store) map[string]bool {
	_, item := lambdakit.StoreAs[lambdakit.ItemStore](s)
	_, checker := lambdakit.StoreAs[lambdakit.StagingChecker](s)
	_, committer := lambdakit.StoreAs[lambdakit.Committer](s)
	_, marker := lambdakit.StoreAs[lambdakit.EffectMarker](s)
	_, getter := lambdakit.StoreAs[lambdakit.BatchGetter](s)
	_, limiter := lambdakit.StoreAs[lambdakit.IDLimiter](s)
	return map[string]bool{"ItemStore": item, "StagingChecker": checker, "Committer": committer,
		"EffectMarker": marker, "BatchGetter": getter, "IDLimiter": limiter}
}

func TestFaultyStoreHasExactlyTheCapabilitiesOfItsStore(t *testing.T) {
	for name, store := range map[string]lambdakit.Store{
		"memory store": &lambdakittest.MemoryStore{},
		"bare store":   bareStore{&lambdakittest.MemoryStore{}},
	} {
		t.Run(name, func(t *testing.T) {
			want := has(store)
			got := has(&storetest.FaultyStore{Store: store})
			for c := range want {
				if got[c] != want[c] {
					t.Errorf("%s found through FaultyStore: %v; want %v, as in the store", c, got[c], want[c])
				}
			}
		})
	}
}

func TestFaultyStoreWritesTheItemOfSetItem(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(&storetest.FaultyStore{Store: mem}, func(o *lambdakit.Options) {
		o.Prefix = "p"
		o.Logger = slog.New(slog.DiscardHandler)
	})
	if _, err := e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
		return nil, lambdakit.SetItem(ctx, map[string]any{"amount": 5})
	}); err != nil {
		t.Fatal(err)
	}
	if item, ok := mem.Item(lambdakit.RecordID("p", "k")); !ok || item["amount"] != 5 {
		t.Errorf("item %v, %v; want amount 5 written on the record", item, ok)
	}
}

// Commit, MarkEffect and GetRecords fail as Complete does: with Rate 1,
// every call, half of them before the call reaches the store.
func TestFaultyStoreInjectsFaultsIntoCommitMarkEffectAndGetRecords(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	s := &storetest.FaultyStore{Store: mem, Rate: 1, Seed: 3}
	committer, ok := lambdakit.StoreAs[lambdakit.Committer](s)
	if !ok {
		t.Fatal("no Committer through FaultyStore over a MemoryStore")
	}
	marker, ok := lambdakit.StoreAs[lambdakit.EffectMarker](s)
	if !ok {
		t.Fatal("no EffectMarker through FaultyStore over a MemoryStore")
	}
	getter, ok := lambdakit.StoreAs[lambdakit.BatchGetter](s)
	if !ok {
		t.Fatal("no BatchGetter through FaultyStore over a MemoryStore")
	}
	now := time.Now()
	const rounds = 20
	for i := range rounds {
		// In progress under l1, put straight into the memory store, so
		// that a mark or completion that goes through succeeds.
		rec := lambdakit.IdempotencyRecord{ID: "p#" + string(rune('a'+i)), Status: lambdakit.StatusInProgress,
			Lease: "l1", InProgressExpiration: now.Add(time.Minute), Expiration: now.Add(time.Hour)}
		mem.Put(rec)
		done := rec
		done.Status = lambdakit.StatusCompleted
		calls := map[string]error{
			"mark effect": marker.MarkEffect(t.Context(), rec.ID, rec.Lease, "charge ch_1"),
			"complete":    s.Complete(t.Context(), done),
		}
		fresh := done
		fresh.ID += "-new"
		_, _, calls["commit"] = committer.Commit(t.Context(), fresh, now)
		_, calls["get records"] = getter.GetRecords(t.Context(), []string{rec.ID})
		for name, err := range calls {
			if !errors.Is(err, storetest.ErrInjected) {
				t.Errorf("%s at rate 1: %v; want ErrInjected", name, err)
			}
		}
	}
	if got := s.Injected(); got != 4*rounds {
		t.Errorf("injected %d faults; want %d", got, 4*rounds)
	}
	// Half the faults come after the call: some commits and reads went through.
	if c := mem.Calls(); c.Commit == 0 || c.Commit == rounds || c.GetRecords == 0 || c.GetRecords == rounds {
		t.Errorf("the memory store got %+v; want some of the %d commits and reads, not all", c, rounds)
	}
}
