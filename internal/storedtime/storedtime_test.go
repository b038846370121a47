package storedtime

import (
	"math"
	"testing"
	"time"
)

// A number Valkey keeps reads as the scripts compare it with a whole now,
// as a float64: integers as they are, fractions rounded up, numbers past
// int64 at its nearest end; text that is no number, and NaN, are not read.
func TestNumberReadsAStoredNumberAsAConditionComparesIt(t *testing.T) {
	checkReads(t, "Number", Number, []reading{
		{"1795816866", 1795816866, true},
		{"1.5", 2, true},
		{"-1.5", -1, true},
		// Lua's tonumber rounds it onto the second, as Valkey's
		// scripts compare it (Decimal does not).
		{"1795816866.0000000000000000000001", 1795816866, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9.3e18", math.MaxInt64, true},
		{"1E+30", math.MaxInt64, true},
		{"-1e300", math.MinInt64, true},
		{"1e400", math.MaxInt64, true},
		{"NaN", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	})
}

// reading is what a stored number in reads as: want, or nothing (!ok).
type reading struct {
	in   string
	want int64
	ok   bool
}

func checkReads(t *testing.T, name string, read func(string) (int64, bool), readings []reading) {
	t.Helper()
	for _, c := range readings {
		if got, ok := read(c.in); got != c.want || ok != c.ok {
			t.Errorf("%s(%q) = %d, %v; want %d, %v", name, c.in, got, ok, c.want, c.ok)
		}
	}
}

// A DynamoDB number reads as DynamoDB's condition compares it with a
// whole now, exactly: a fraction float64 would round to an integer still
// counts until the next unit; numbers past int64, up to DynamoDB's 1E+125,
// sit at its ends.
func TestDecimalReadsADynamoDBNumberExactly(t *testing.T) {
	checkReads(t, "Decimal", Decimal, []reading{
		{"1795816866", 1795816866, true},
		{"1795816866.0000000000000000000001", 1795816867, true},
		{"1795816865.9999999999999999999999", 1795816866, true},
		{"1795816866000.00001", 1795816866001, true},
		{"1.000000000000000000000000000000000001", 2, true},
		{"17958168665E-1", 1795816867, true},
		{"-1795816866.5", -1795816866, true},
		{"0.0000001", 1, true},
		{"1E-130", 1, true},
		{"-1E-130", 0, true},
		{"-0", 0, true},
		{"9223372036854775806.5", math.MaxInt64, true},
		{"9223372036854775807.5", math.MaxInt64, true},
		{"-9223372036854775808.5", math.MinInt64, true},
		{"1E+125", math.MaxInt64, true},
		{"-1E+125", math.MinInt64, true},
		{"NaN", 0, false},
		{"0x10", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	})
}

// A time past what time.Time holds stays on its side of now as a record's
// liveness reads it (lambdakit.IdempotencyRecord.Live: a zero expiration
// is none, else the record is live before it): Java's Long.MAX_VALUE for
// "never" is live (time.Unix gives a time before now for it); one before
// the year 1 is expired, not the zero time, which would be no expiration.
// Times time.Time holds are exact. (An internal package: it cannot call
// Live itself.)
func TestUnixKeepsEachTimeOnItsSideOfNow(t *testing.T) {
	now := time.Now()
	live := func(sec int64) bool {
		exp := Unix(sec)
		return exp.IsZero() || now.Before(exp)
	}
	if !live(math.MaxInt64) {
		t.Errorf("expiration MaxInt64 (%v) read as expired; want live", Unix(math.MaxInt64))
	}
	for _, sec := range []int64{math.MinInt64, firstSecond - 1, -62135596800} {
		if live(sec) {
			t.Errorf("expiration %d (%v) read as live; want expired", sec, Unix(sec))
		}
	}
	for _, sec := range []int64{0, 1795816866, lastSecond, firstSecond} {
		if got := Unix(sec).Unix(); got != sec {
			t.Errorf("Unix(%d).Unix() = %d; want it back", sec, got)
		}
	}
}
