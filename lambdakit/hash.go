package lambdakit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// recordID is the store's ID of key: "<Prefix>#<sha256 hex of key>". No raw
// key is kept in the table; the hex part is also the FIFO deduplication ID
// the producer sends for the key.
func (e *Idempotency) recordID(key string) string {
	sum := sha256.Sum256(bytesOf(key))
	b := make([]byte, 0, len(e.opts.Prefix)+1+2*len(sum))
	b = append(b, e.opts.Prefix...)
	b = append(b, '#')
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}

func hashHex(p string) string {
	sum := sha256.Sum256(bytesOf(p))
	return hex.EncodeToString(sum[:])
}

// newLease returns a token for a lease acquired at now: the time in epoch
// milliseconds, a dot and 128 random bits. The random part fences owners
// apart; it is no secret, so the fast runtime generator will do. The time
// lets an owner whose release was refused tell a takeover from its own
// earlier release (see releasedEarlier).
func newLease(now time.Time) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return strconv.FormatInt(now.UnixMilli(), 10) + "." + hex.EncodeToString(b[:])
}

// leaseTaken returns when, by its owner's clock, the lease was acquired: the
// prefix newLease gives it. ok is false for a token without one (another
// runtime's, or an older lambdakit's).
func leaseTaken(lease string) (t time.Time, ok bool) {
	ms, _, found := strings.Cut(lease, ".")
	if !found {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}
