// Package storedtime reads the times an idempotency record's store keeps
// as numbers (an expiration in Unix seconds, an in-progress expiration in
// milliseconds) as the store's own conditions compare them, so that a
// record the store keeps live is read as live, whatever another runtime
// wrote: a fraction, or a number far past any date, such as Java's
// Long.MAX_VALUE for "never".
package storedtime

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"time"
)

// Number parses s, a number Valkey keeps as text, as the scripts' Lua
// compares it with a whole now: as a float64 (tonumber), an integer as it
// is; a fraction rounded up, since it counts until the next whole unit;
// and a number past int64's range as the nearest end of that range, which
// is past every now on the same side. ok is false for text that is not a
// finite number.
func Number(s string) (n int64, ok bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) {
		return 0, false
	}
	// ParseFloat gives ±Inf for a number past float64, with a range
	// error: still a number, past every now.
	switch c := math.Ceil(f); {
	case c >= -math.MinInt64: // 2^63, exact in a float64
		return math.MaxInt64, true
	case c < math.MinInt64:
		return math.MinInt64, true
	default:
		return int64(c), true
	}
}

// Decimal parses s, a DynamoDB number, as DynamoDB's condition compares
// it with a whole now: exactly, as a decimal, not as a float64 would round
// it ("1795816866.0000000000000000000001" is after 1795816866 there, so
// it counts until the next second); otherwise as Number does. DynamoDB
// keeps up to 38 significant digits: 256 bits hold every such number
// apart from the integers next to it.
func Decimal(s string) (n int64, ok bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true // what lambdakit writes: no big.Float for it
	}
	f, _, err := new(big.Float).SetPrec(256).Parse(s, 10)
	if err != nil {
		return 0, false
	}
	i, acc := f.Int(nil) // toward zero; nil for an infinity
	if i != nil && acc == big.Below {
		i.Add(i, big.NewInt(1)) // a positive fraction, rounded up
	}
	switch {
	case i != nil && i.IsInt64():
		return i.Int64(), true
	case f.Sign() > 0:
		return math.MaxInt64, true
	default:
		return math.MinInt64, true
	}
}

// Unix is the time sec seconds after 1970-01-01 UTC. time.Time does not
// hold every int64 of seconds (time.Unix(math.MaxInt64, 0) is before
// now), so a time after the year 9999 is read as the last second of that
// year, and one before the year 1 as 0001-01-01T00:00:01Z: each on the
// same side of every now as the number. Not the zero time.Time, the year
// 1's first second: IdempotencyRecord.Live reads that as no expiration.
func Unix(sec int64) time.Time {
	return time.Unix(min(max(sec, firstSecond), lastSecond), 0)
}

// firstSecond and lastSecond are 0001-01-01T00:00:01Z and
// 9999-12-31T23:59:59Z in Unix seconds.
const (
	firstSecond = -62135596800 + 1
	lastSecond  = 253402300799
)
