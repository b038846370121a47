package valkeystore

import (
	"math"
	"testing"
)

// A stored time is read as the scripts compare it (storedtime.Number): a
// number past int64, which the scripts keep live for ever, is the largest
// int64, not the most negative (a record long expired, as it was read
// before); an absent field is no time; text that is no number is refused.
func TestIntegerReadsAStoredTimeAsTheScriptsCompareIt(t *testing.T) {
	if got, ok, err := integer("1e300"); err != nil || !ok || got != math.MaxInt64 {
		t.Errorf("integer(1e300) = %d, %v, %v; want MaxInt64", got, ok, err)
	}
	if got, ok, err := integer(""); err != nil || ok {
		t.Errorf("integer(\"\") = %d, %v, %v; want no time and no error", got, ok, err)
	}
	if _, _, err := integer("soon"); err == nil {
		t.Error("integer(soon): no error; want it refused")
	}
}
