package lambdakit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// When Lambda re-drives a whole batch (after a timeout, a crash, or a
// batch-level error), most of its records were completed the first time.
// Finding that out one record at a time costs one failed conditional write
// each: a request and a write unit. The prefetch asks once per batch, with
// one strongly consistent batch read (read units, up to 100 records a
// request), which of the batch's likely duplicates are completed; those are
// answered from what it found, and only the others take the lock.
//
// It works through any chain of middleware: Batch puts the batch's records
// in the context, and the first record of a batch that is a likely
// duplicate makes the read for all of them.

// PrefetchPolicy says when Idempotent reads a batch's completed records
// ahead, in one request, instead of one conditional write per record. It
// needs a Store that implements BatchGetter (dynamostore.Store and
// lambdakittest.MemoryStore do) and a handler run by Batch.
type PrefetchPolicy int

const (
	// PrefetchRedeliveries reads ahead the records SQS has delivered
	// before (ApproximateReceiveCount above 1), when a batch has any. It
	// is the default: a first delivery costs nothing more, a re-driven
	// batch of completed records costs one read request per 100 records.
	PrefetchRedeliveries PrefetchPolicy = iota
	// PrefetchAlways reads ahead every record of every batch: for
	// producers that often send the same work twice. A batch of new
	// records pays one read request for nothing.
	PrefetchAlways
	// PrefetchNever turns the read ahead off.
	PrefetchNever
)

// BatchGetter is a Store that can read many records in one request.
type BatchGetter interface {
	// GetRecords returns the records stored under ids, by ID, read
	// strongly consistent; IDs without a record are left out. The records
	// are returned as stored, whether live or not.
	GetRecords(ctx context.Context, ids []string) (map[string]IdempotencyRecord, error)
}

type batchKey struct{}

// batchInfo is what Batch tells its records' handlers about the batch.
type batchInfo struct {
	msgs []events.SQSMessage
	mu   sync.Mutex
	// reads holds one read ahead per idempotency middleware, made once.
	reads map[*idempotencyState]*readAhead
}

type readAhead struct {
	once sync.Once
	recs map[string]IdempotencyRecord
}

func withBatch(ctx context.Context, msgs []events.SQSMessage) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchInfo{msgs: msgs})
}

func (b *batchInfo) readAhead(state *idempotencyState) *readAhead {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reads == nil {
		b.reads = map[*idempotencyState]*readAhead{}
	}
	r, ok := b.reads[state]
	if !ok {
		r = &readAhead{}
		b.reads[state] = r
	}
	return r
}

// likelyDuplicate reports whether msg is worth reading ahead under the
// policy.
func (m *idempotent) likelyDuplicate(msg *events.SQSMessage) bool {
	switch m.opts.Prefetch {
	case PrefetchAlways:
		return true
	case PrefetchRedeliveries:
		n := msg.Attributes["ApproximateReceiveCount"]
		return n != "" && n != "0" && n != "1"
	default:
		return false
	}
}

// prefetched returns the completed, live record of id that the batch's read
// ahead found, reading ahead first if this is the batch's first likely
// duplicate to ask.
func (m *idempotent) prefetched(ctx context.Context, msg *events.SQSMessage, id string, now time.Time) (IdempotencyRecord, bool) {
	if m.getter == nil || !m.likelyDuplicate(msg) {
		return IdempotencyRecord{}, false
	}
	b, _ := ctx.Value(batchKey{}).(*batchInfo)
	if b == nil {
		return IdempotencyRecord{}, false
	}
	r := b.readAhead(m.state)
	r.once.Do(func() { r.recs = m.readAhead(ctx, b.msgs, now) })
	rec, ok := r.recs[id]
	if !ok || rec.ID != id || rec.Status != StatusCompleted || rec.foreign() || !rec.Live(now) {
		return IdempotencyRecord{}, false
	}
	return rec, true
}

// readAhead reads the records of the batch's likely duplicates that this
// container has not cached. A failed read only costs the fast path: every
// record then takes the lock as usual.
func (m *idempotent) readAhead(ctx context.Context, msgs []events.SQSMessage, now time.Time) (found map[string]IdempotencyRecord) {
	// It runs the key function on other records of the batch, and the
	// store's read, in the goroutine of whichever record asked first: a
	// panic of either must not fail that record. It only costs the fast
	// path.
	if pe := protect(func() { found = m.readUncached(ctx, msgs, now) }, nil); pe != nil {
		m.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: read ahead failed; every record takes the lock",
			slog.String("reason", pe.Error()))
		return nil
	}
	return found
}

// readUncached is readAhead, but lets a panic of the key function through.
func (m *idempotent) readUncached(ctx context.Context, msgs []events.SQSMessage, now time.Time) map[string]IdempotencyRecord {
	seen := map[string]bool{}
	var ids []string
	for i := range msgs {
		msg := &msgs[i]
		if !m.likelyDuplicate(msg) {
			continue
		}
		key, err := m.key(msg)
		if err != nil {
			continue
		}
		id, err := m.recordID(key)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		if _, ok := m.state.cache.get(id, now); ok {
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	// A store's panic names the records as its errors may: its text is
	// hidden alike.
	var recs map[string]IdempotencyRecord
	var err error
	if pe := protect(func() { recs, err = m.getter.GetRecords(m.withReadableIDs(ctx), ids) }, nil); pe != nil {
		err = pe
	}
	if err != nil {
		// The store's text may name the records (ReadableIDs: see
		// StoreError.Error).
		reason := hideKeyIn(err.Error(), m.keyAt(), ids...)
		m.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: read ahead failed; every record takes the lock",
			slog.Int("records", len(ids)), slog.String("reason", reason))
		return nil
	}
	return recs
}
