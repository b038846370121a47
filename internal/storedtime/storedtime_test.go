package storedtime

import (
	"math"
	"testing"
	"time"
)

// A stored number reads as the stores' conditions compare it with a whole
// now: integers as they are, fractions rounded up, numbers past int64 at
// its nearest end; text that is no number, and NaN, are not read.
func TestNumberReadsAStoredNumberAsAConditionComparesIt(t *testing.T) {
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
		{"9.3e18", math.MaxInt64, true},
		{"1E+30", math.MaxInt64, true},
		{"-1e300", math.MinInt64, true},
		{"1e400", math.MaxInt64, true},
		{"NaN", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		if got, ok := Number(c.in); got != c.want || ok != c.ok {
			t.Errorf("Number(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// A time past what time.Time holds stays on its side of now: Java's
// Long.MAX_VALUE for "never" is after now (time.Unix gives a time before
// it), math.MinInt64 before; times time.Time holds are exact.
func TestUnixKeepsEachTimeOnItsSideOfNow(t *testing.T) {
	now := time.Now()
	if got := Unix(math.MaxInt64); !got.After(now) {
		t.Errorf("Unix(MaxInt64) = %v; want after now", got)
	}
	if got := Unix(math.MinInt64); !got.Before(now) {
		t.Errorf("Unix(MinInt64) = %v; want before now", got)
	}
	for _, sec := range []int64{0, 1795816866, lastSecond, firstSecond} {
		if got := Unix(sec).Unix(); got != sec {
			t.Errorf("Unix(%d).Unix() = %d; want it back", sec, got)
		}
	}
}
