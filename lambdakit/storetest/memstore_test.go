package storetest_test

import (
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store {
		return &lambdakittest.MemoryStore{}
	})
}

func TestMemoryStoreUnknownStatusContract(t *testing.T) {
	storetest.RunUnknownStatusContract(t, func(*testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} },
		func(_ *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord) {
			s.(*lambdakittest.MemoryStore).Put(rec)
		})
}

func TestFaultyStoreWithoutFaultsMeetsContract(t *testing.T) {
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store {
		return &storetest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 0}
	})
}

func TestFaultyStoreInjectsTheChosenFraction(t *testing.T) {
	s := &storetest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 0.3, Seed: 7}
	const calls = 2000
	for i := range calls {
		_ = s.Release(t.Context(), "id", string(rune('a'+i%26)))
	}
	got := float64(s.Injected()) / calls
	if got < 0.25 || got > 0.35 {
		t.Errorf("got fault rate %.3f; want about 0.3", got)
	}
}

func TestMemoryStoreCommitContract(t *testing.T) {
	storetest.RunCommitContract(t, func(*testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} })
}

func TestMemoryStoreModes(t *testing.T) {
	storetest.RunModeChecks(t, func(*testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} },
		func(attrs map[string]string) any {
			m := make(map[string]any, len(attrs))
			for k, v := range attrs {
				m[k] = v
			}
			return m
		})
}

func TestMemoryStoreCrashChecks(t *testing.T) {
	storetest.RunCrashChecks(t, func(*testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} })
}
