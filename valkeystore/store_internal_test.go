package valkeystore

import (
	"math"
	"testing"
)

// A stored time is read as the scripts compare it: an integer as it is, a
// fraction rounded up, and anything past int64's range refused, never
// converted into some other time (1e300 read as long expired would let a
// record the scripts keep for ever be taken for gone).
func TestIntegerReadsAStoredTimeOrRefusesIt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1795816866", 1795816866, true},
		{"1.5", 2, true},
		{"-1.5", -1, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"-9.223372036854775808e18", math.MinInt64, true},
		{"9.3e18", 0, false},
		{"1e300", 0, false},
		{"-1e300", 0, false},
		{"inf", 0, false},
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
