package lambdakit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lambdakit/lambdakit/internal/idtext"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// RecordID returns the ID of the idempotency record of key, for the
// records of prefix (Options.Prefix): "<prefix>#<KeyHash(key)>".
// No raw key is kept in a store.
func RecordID(prefix, key string) string {
	sum := sha256.Sum256(bytesOf(key))
	var hexSum [2 * sha256.Size]byte // on the stack
	hex.Encode(hexSum[:], sum[:])
	// The builder's buffer becomes the string: one allocation.
	var id strings.Builder
	id.Grow(len(prefix) + 1 + len(hexSum))
	id.WriteString(prefix)
	id.WriteByte('#')
	id.Write(hexSum[:])
	return id.String()
}

// KeyHash returns the hex SHA-256 of key, 64 characters: the part of its
// record ID after the prefix, and the FIFO MessageDeduplicationId
// producer.DedupID gives a message with the key. (The engine hashes
// payloads the same way, for validation.)
func KeyHash(key string) string {
	sum := sha256.Sum256(bytesOf(key))
	// Encoded on the stack: the string is the one allocation.
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	return string(buf[:])
}

// maxReadableID is the longest ID ReadableIDs allows in any store:
// DynamoDB's limit on a partition key, 2048 bytes (a store may allow less:
// IDLimiter).
const maxReadableID = awsrules.MaxPartitionKeyBytes

// recordID is the ID of key's record: RecordID with the engine's prefix,
// or with ReadableIDs "<Prefix>#<key>", refused with ErrInvalidKey when
// it cannot be a DynamoDB key. (A hashed ID always can.)
func (e *Once) recordID(key string) (string, error) {
	if !e.opts.ReadableIDs {
		return RecordID(e.opts.Prefix, key), nil
	}
	id := e.opts.Prefix + "#" + key
	limit := e.idLimit
	switch {
	case len(id) > limit:
		return "", fmt.Errorf("%w: with ReadableIDs, the record ID of a key of %d bytes would be %d bytes, over the store's %d-byte key limit", ErrInvalidKey, len(key), len(id), limit)
	case !utf8.ValidString(key):
		return "", fmt.Errorf("%w: with ReadableIDs, the key must be UTF-8 text, as a DynamoDB key is", ErrInvalidKey)
	}
	return id, nil
}

// keyAt is where the key starts in the engine's record IDs when they hold
// it (ReadableIDs: "<Prefix>#<key>"), 0 when they do not.
func (e *Once) keyAt() int {
	if !e.opts.ReadableIDs {
		return 0
	}
	return len(e.opts.Prefix) + 1
}

// loggedID is the record ID id as log lines and error texts name it: as it
// is, or with ReadableIDs, whose IDs hold the key, the ID the record would
// have without them (RecordID), so that no key gets into a log line, as
// none gets into a trace (lambdakitotel hashes it alike).
func (e *Once) loggedID(id string) string { return hideKey(id, e.keyAt()) }

// hideKey is loggedID for an id whose key starts at keyAt (Once.keyAt).
// It hashes only when called: when a line or an error text is written,
// never on a record's way through.
func hideKey(id string, keyAt int) string {
	if keyAt == 0 || len(id) < keyAt {
		return id
	}
	return RecordID(id[:keyAt-1], id[keyAt:])
}

// readablePrefix is the context key under which an engine with
// ReadableIDs puts its Prefix for its store calls (LoggedRecordID).
type readablePrefix struct{}

// withReadableIDs is ctx for the store calls on a record: with ReadableIDs
// on a wrapped store it carries the engine's Prefix, so that the wrapper
// can tell that the IDs it gets hold keys (LoggedRecordID). Otherwise it
// is ctx: a record costs nothing more.
func (e *Once) withReadableIDs(ctx context.Context) context.Context {
	if !e.tellIDs {
		return ctx
	}
	return context.WithValue(ctx, readablePrefix{}, e.opts.Prefix)
}

// LoggedRecordID is for Store wrappers (StoreWrapper) that log or trace
// record IDs (lambdakitotel's does): on a store call of an engine with
// Options.ReadableIDs, whose IDs hold the key ("<Prefix>#<key>"), it
// returns the ID the record would have without them (RecordID), as
// lambdakit's log lines name it, and true. On any other call, or for an
// ID of another prefix, it returns id and false: the ID is hashed already,
// or not known to hold a key.
func LoggedRecordID(ctx context.Context, id string) (string, bool) {
	prefix, ok := ctx.Value(readablePrefix{}).(string)
	if !ok || len(id) <= len(prefix) || id[len(prefix)] != '#' || id[:len(prefix)] != prefix {
		return id, false
	}
	return RecordID(prefix, id[len(prefix)+1:]), true
}

// hideKeyIn is text with every mention of the record IDs ids, whose keys
// start at keyAt (ReadableIDs), replaced by hideKey's ID: for the texts
// of others (a store's errors) that name a record by its stored ID, as it
// is or quoted (%q, %+q), which escapes a key's quotes, backslashes or
// non-ASCII letters.
func hideKeyIn(text string, keyAt int, ids ...string) string {
	if keyAt == 0 {
		return text
	}
	return idtext.Replace(text, ids, func(id string) (string, bool) {
		return hideKey(id, keyAt), len(id) >= keyAt
	})
}

// newLease returns a token for a lease acquired at now: the time in epoch
// milliseconds, a dot and 128 random bits. The random part fences owners
// apart; it is no secret, so the fast runtime generator will do. The time
// lets an owner whose release was refused tell a takeover from its own
// earlier release (see releasedEarlier).
func newLease(now time.Time) string {
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(r[8:], rand.Uint64())
	var buf [20 + 1 + 2*len(r)]byte // on the stack: the string is the one allocation
	b := strconv.AppendInt(buf[:0], now.UnixMilli(), 10)
	b = append(b, '.')
	b = hex.AppendEncode(b, r[:])
	return string(b)
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
