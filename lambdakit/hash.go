package lambdakit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
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

// newLease returns a 128-bit random token. It fences owners apart, it is no
// secret, so the fast runtime generator will do.
func newLease() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}
