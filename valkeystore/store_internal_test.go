package valkeystore

import (
	"math"
	"testing"
)

// A stored time is read as the scripts compare it: an integer as it is, a
// fraction rounded up, and a number past int64's range at its nearest end,
// never converted into a time on the other side of now (1e300 read as the
// most negative int64 made a record the scripts keep for ever look long
// expired). Text that is no number is refused.
func TestIntegerReadsAStoredTimeAsTheScriptsCompareIt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1795816866", 1795816866, true},
		{"1.5", 2, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"9.3e18", math.MaxInt64, true},
		{"1e300", math.MaxInt64, true},
		{"-1e300", math.MinInt64, true},
		{"NaN", 0, false},
		{"soon", 0, false},
	} {
		got, ok, err := integer(c.in)
		if c.ok && (err != nil || !ok || got != c.want) {
			t.Errorf("integer(%q) = %d, %v, %v; want %d", c.in, got, ok, err, c.want)
		}
		if !c.ok && err == nil {
			t.Errorf("integer(%q) = %d, %v; want it refused", c.in, got, ok)
		}
	}
}
