package lambdakit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// A record's outcome is noted as it runs, so that the batch adapter can log
// the record's line (a failure's, or at DEBUG any) and one metrics line per
// invocation, and so that middleware outside Idempotent can tell a replayed
// result from a fresh one. Batch gives each record a note in its context;
// Idempotent fills it.

// Duplicate sources, for the metrics: a duplicate found in the store (by
// the lock's failed condition, or by the batch's read ahead) costs a
// request, one found in the container's cache costs none.
const (
	dupNone = iota
	dupStore
	dupCache
)

// recordNote is what became of one record. The record's goroutine writes
// it; Batch reads it after the record's handler returned, or under mu when
// the batch had to answer first.
type recordNote struct {
	mu        sync.Mutex
	messageID string // the SQS message's, set by Batch before the record runs
	id        string // the idempotency record's ID, once known
	// keyAt, when not 0, is where the key starts in a readable id
	// (Options.ReadableIDs): the line names the record by the ID it would
	// have without them (RecordID), hashed when the line is written.
	keyAt     int
	duplicate int  // dupNone, dupStore or dupCache
	replayed  bool // a cached result was handed back
	// deadLettered is the permanent failure of a record the batch sent to
	// the dead-letter queue, and reports succeeded.
	deadLettered error
	// attrs are the handler's own fields for the record's line (AddLogAttrs).
	attrs    []slog.Attr
	start    time.Time
	elapsed  time.Duration
	store    []time.Duration  // each store request's latency
	storeBuf [4]time.Duration // room for a record's usual requests
	// retryIn is the visibility timeout Backoff gave the failed record,
	// and retryErr why it was not set (nil when it was).
	retryIn  time.Duration
	retryErr error
}

type noteKey struct{}

func noteFrom(ctx context.Context) *recordNote {
	n, _ := ctx.Value(noteKey{}).(*recordNote)
	return n
}

// setID records the record's ID, and where its key starts if the ID holds
// it (0 if not); nil-safe, like every recordNote method, so that
// Idempotent works the same outside Batch.
func (n *recordNote) setID(id string, keyAt int) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.id, n.keyAt = id, keyAt
	n.mu.Unlock()
}

// loggedID is the record's ID as its line gives it: never with the key.
// Called under mu.
func (n *recordNote) loggedID() string { return hideKey(n.id, n.keyAt) }

func (n *recordNote) setDuplicate(source int, replayed bool) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.duplicate, n.replayed = source, replayed
	n.mu.Unlock()
}

// storeCall times one store request: defer note.storeCall(time.Now()).
func (n *recordNote) storeCall(start time.Time) {
	if n == nil {
		return
	}
	d := time.Since(start)
	n.mu.Lock()
	if n.store == nil {
		n.store = n.storeBuf[:0]
	}
	n.store = append(n.store, d)
	n.mu.Unlock()
}

// AddLogAttrs adds attrs to the one line Batch logs for the record whose
// context is ctx (the line of its failure, or "message done", written at
// DEBUG only), so that a handler's own fields, a payment ID or a charge ID,
// stand beside the record's outcome instead of on a line of their own: at
// most one line, and one write, per record. Attributes of a record whose
// line is not written are never resolved (a slog.LogValuer's LogValue is
// not called). The batch's own names (messageId, recordId, messageGroupId,
// durationMs, outcome, reasonCode, reason, stack, and a lost lease's
// metric fields) stay the batch's: an attribute named like one of them is
// written as "handler.<name>". Outside Batch it adds nothing and reports
// false, so the caller can log for itself.
func AddLogAttrs(ctx context.Context, attrs ...slog.Attr) bool {
	n := noteFrom(ctx)
	if n == nil {
		return false
	}
	n.mu.Lock()
	n.attrs = append(n.attrs, attrs...)
	n.mu.Unlock()
	return true
}

// batchLogKeys are the names of the fields Batch writes on a record's line.
var batchLogKeys = map[string]bool{
	"messageId": true, "recordId": true, "messageGroupId": true, "durationMs": true, "outcome": true,
	"reasonCode": true, "reason": true, "stack": true, "prefix": true, "op": true, "LeaseLost": true, "_aws": true,
}

// handlerAttrs returns the handler's attributes for the record's line, those
// named like the batch's own renamed.
func handlerAttrs(attrs []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		if batchLogKeys[a.Key] {
			a.Key = "handler." + a.Key
		}
		out[i] = a
	}
	return out
}

// Replayed reports whether the result Idempotent returned for the record
// whose context is ctx was replayed from an earlier run of its key (a
// duplicate), rather than produced by the handler just now. Middleware
// outside Idempotent calls it, with the context its Handle was given, after
// the inner handler returned; it reports false outside Batch.
func Replayed(ctx context.Context) bool {
	n := noteFrom(ctx)
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.duplicate != dupNone
}

// StoreError is a failure of a Store request (other than a lost lease):
// the record failed because its idempotency record could not be read or
// written, not because of its handler.
type StoreError struct {
	Op  string // "acquire", "complete" or "release"
	Err error
	// id and keyAt name the record as the store's text may name it, and
	// where its key starts (Options.ReadableIDs; 0 without them).
	id    string
	keyAt int
}

// Error implements error. With ReadableIDs, the record's stored ID in the
// store's text, which holds the key, reads as the ID the record would have
// without them (RecordID), as the log line names the record; Err keeps the
// store's own text.
func (e *StoreError) Error() string {
	return "lambdakit: store " + e.Op + ": " + hideKeyIn(e.Err.Error(), e.keyAt, e.id)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// storeErr wraps a store's error of a call on the record id in a
// *StoreError, leaving a lost lease, which has a reason of its own (see
// leaseLost), as it is.
func (e *Once) storeErr(op, id string, err error) error {
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return err
	}
	return &StoreError{Op: op, Err: err, id: id, keyAt: e.keyAt()}
}

// messageAttr is the record's SQS message ID as a log attribute, for the
// engine's own lines, which know no message: empty outside Batch.
func messageAttr(ctx context.Context) slog.Attr {
	if n := noteFrom(ctx); n != nil {
		return slog.String("messageId", n.messageID)
	}
	return slog.Attr{}
}
