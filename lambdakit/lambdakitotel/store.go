package lambdakitotel

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/internal/idtext"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// Store operations, as StoreOperationKey names them and the span names end.
const (
	opAcquire    = "acquire"
	opComplete   = "complete"
	opRelease    = "release"
	opGetRecords = "get_records"
	opCommit     = "commit"
	opMarkEffect = "mark_effect"
)

// WrapStore returns store with a span around each request:
// "lambdakit.store.<operation>" (acquire, complete, release, get_records,
// commit, mark_effect), kind INTERNAL (an instrumented AWS SDK client adds
// its own CLIENT span below it), with StoreOperationKey and RecordIDKey
// (the record's hashed ID, never the raw key, with lambdakit's
// Options.ReadableIDs too), AcquiredKey and ExistingStatusKey
// for an acquire or a commit, and for a failure an Error status with
// error.type: LeaseLost (and LeaseLostKey true), Throttled,
// ResultNotStorable, StagingUnsupported, or _OTHER.
//
// The returned store is a lambdakit.StoreWrapper: the engine finds
// through it every optional capability of store (lambdakit.StoreAs), so
// that SetItem, the checks of what a handler stages, Options.StagedOnly,
// Options.StoreEffect and the key length limit of Options.ReadableIDs work
// as they do on store itself. Those that send requests (Commit,
// MarkEffect, GetRecords) are traced; the checks that send none are not.
// It also implements lambdakit.BatchGetter itself exactly when store does.
func WrapStore(store lambdakit.Store, optFns ...func(*Options)) lambdakit.Store {
	o := newOptions(optFns)
	s := &tracedStore{next: store, tracer: o.tracer(), inner: store}
	// What Unwrap returns: store, under a traced layer for each capability
	// that sends requests, when store has it. A layer per capability keeps
	// the engine from seeing one store lacks.
	if m, ok := lambdakit.StoreAs[lambdakit.EffectMarker](store); ok {
		s.inner = &tracedMarker{Store: s.inner, s: s, marker: m}
	}
	if c, ok := lambdakit.StoreAs[lambdakit.Committer](store); ok {
		s.inner = &tracedCommitter{Store: s.inner, s: s, committer: c}
	}
	if g, ok := lambdakit.StoreAs[lambdakit.BatchGetter](store); ok {
		return &tracedBatchStore{tracedStore: s, getter: g}
	}
	return s
}

type tracedStore struct {
	next   lambdakit.Store
	tracer trace.Tracer
	inner  lambdakit.Store // what Unwrap returns: next, under the traced layers
}

// tracedBatchStore is a tracedStore over a store that can read ahead.
type tracedBatchStore struct {
	*tracedStore
	getter lambdakit.BatchGetter
}

// tracedCommitter is the layer that traces a Committer's Commit. Its
// Store methods are those of the layers below: the engine calls the
// tracedStore's.
type tracedCommitter struct {
	lambdakit.Store
	s         *tracedStore
	committer lambdakit.Committer
}

// tracedMarker is the layer that traces an EffectMarker's MarkEffect.
type tracedMarker struct {
	lambdakit.Store
	s      *tracedStore
	marker lambdakit.EffectMarker
}

var (
	_ lambdakit.StoreWrapper = (*tracedStore)(nil)
	_ lambdakit.BatchGetter  = (*tracedBatchStore)(nil)
	_ lambdakit.StoreWrapper = (*tracedCommitter)(nil)
	_ lambdakit.Committer    = (*tracedCommitter)(nil)
	_ lambdakit.StoreWrapper = (*tracedMarker)(nil)
	_ lambdakit.EffectMarker = (*tracedMarker)(nil)
)

// Unwrap implements lambdakit.StoreWrapper.
func (s *tracedStore) Unwrap() lambdakit.Store { return s.inner }

// Unwrap implements lambdakit.StoreWrapper.
func (l *tracedCommitter) Unwrap() lambdakit.Store { return l.Store }

// Unwrap implements lambdakit.StoreWrapper.
func (l *tracedMarker) Unwrap() lambdakit.Store { return l.Store }

func (s *tracedStore) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "lambdakit.store."+op, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(attrs, StoreOperationKey.String(op))...))
}

// Acquire implements lambdakit.Store.
func (s *tracedStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	ctx, span := s.start(ctx, opAcquire, recordIDAttr(ctx, rec.ID))
	defer span.End()
	existing, acquired, err := s.next.Acquire(ctx, rec, now)
	claimed(ctx, span, existing, acquired, err, rec.ID)
	return existing, acquired, err
}

// Complete implements lambdakit.Store.
func (s *tracedStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	ctx, span := s.start(ctx, opComplete, recordIDAttr(ctx, rec.ID), StagedWritesKey.Int(len(rec.Staged)))
	defer span.End()
	err := s.next.Complete(ctx, rec)
	if err != nil {
		fail(ctx, span, err, rec.ID)
	}
	return err
}

// Release implements lambdakit.Store.
func (s *tracedStore) Release(ctx context.Context, id, lease string) error {
	ctx, span := s.start(ctx, opRelease, recordIDAttr(ctx, id))
	defer span.End()
	err := s.next.Release(ctx, id, lease)
	if err != nil {
		fail(ctx, span, err, id)
	}
	return err
}

// GetRecords implements lambdakit.BatchGetter.
func (s *tracedBatchStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	ctx, span := s.start(ctx, opGetRecords, RequestedKey.Int(len(ids)))
	defer span.End()
	recs, err := s.getter.GetRecords(ctx, ids)
	if err != nil {
		fail(ctx, span, err, ids...)
		return recs, err
	}
	span.SetAttributes(FoundKey.Int(len(recs)))
	return recs, nil
}

// Commit implements lambdakit.Committer.
func (l *tracedCommitter) Commit(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	ctx, span := l.s.start(ctx, opCommit, recordIDAttr(ctx, rec.ID), StagedWritesKey.Int(len(rec.Staged)))
	defer span.End()
	existing, created, err := l.committer.Commit(ctx, rec, now)
	claimed(ctx, span, existing, created, err, rec.ID)
	return existing, created, err
}

// MarkEffect implements lambdakit.EffectMarker.
func (l *tracedMarker) MarkEffect(ctx context.Context, id, lease, effect string) error {
	ctx, span := l.s.start(ctx, opMarkEffect, recordIDAttr(ctx, id))
	defer span.End()
	err := l.marker.MarkEffect(ctx, id, lease, effect)
	if err != nil {
		fail(ctx, span, err, id)
	}
	return err
}

// recordIDAttr is RecordIDKey for the record id of a store call on ctx:
// the prefix and a SHA-256 of the key, never the key. On the calls of an
// engine with Options.ReadableIDs ("<Prefix>#<key>"), the engine says so
// (lambdakit.LoggedRecordID), and the key is hashed, giving the ID the
// record would have without ReadableIDs. A store called otherwise is told
// by the ID's shape: one that ends in '#' and a SHA-256 is hashed already.
func recordIDAttr(ctx context.Context, id string) attribute.KeyValue {
	if shown, ok := lambdakit.LoggedRecordID(ctx, id); ok {
		return RecordIDKey.String(shown)
	}
	if i := strings.LastIndexByte(id, '#'); i >= 0 && isKeyHash(id[i+1:]) {
		return RecordIDKey.String(id)
	}
	prefix, key, ok := strings.Cut(id, "#")
	if !ok { // no ID the engine makes: hash it whole
		return RecordIDKey.String(lambdakit.KeyHash(id))
	}
	return RecordIDKey.String(lambdakit.RecordID(prefix, key))
}

// isKeyHash reports whether s is a lambdakit.KeyHash: 64 lowercase hex
// digits.
func isKeyHash(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// claimed ends the span of an acquire or a commit of the record id:
// whether it took the record, and if not, the status of the one that holds
// it.
func claimed(ctx context.Context, span trace.Span, existing lambdakit.IdempotencyRecord, took bool, err error, id string) {
	if err != nil {
		fail(ctx, span, err, id)
		return
	}
	span.SetAttributes(AcquiredKey.Bool(took))
	if !took && existing.Status != "" {
		span.SetAttributes(ExistingStatusKey.String(string(existing.Status)))
	}
}

// fail marks a store span of a call on the records ids failed. A lost
// lease is marked apart: it means another owner took the record over,
// which an alarm should hear of.
func fail(ctx context.Context, span trace.Span, err error, ids ...string) {
	typ := errorTypeOther
	switch {
	case errors.Is(err, lambdakit.ErrLeaseLost):
		typ = string(lambdakit.ReasonLeaseLost)
		span.SetAttributes(LeaseLostKey.Bool(true))
	case errors.Is(err, lambdakit.ErrThrottled):
		typ = "Throttled"
	case errors.Is(err, lambdakit.ErrResultNotStorable):
		typ = "ResultNotStorable"
	case errors.Is(err, lambdakit.ErrStagingUnsupported):
		typ = "StagingUnsupported"
	case errors.Is(err, context.DeadlineExceeded):
		typ = "Deadline"
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(typ))
	text := err.Error()
	if shown := withoutKeys(ctx, text, ids); shown != text {
		// The store's text names a record by a readable ID, which holds
		// its key: the span names it as record_id does. RecordError
		// would write the text as it is.
		span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
			semconv.ExceptionType(fmt.Sprintf("%T", err)), semconv.ExceptionMessage(shown)))
		span.SetStatus(codes.Error, shown)
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, text)
}

// withoutKeys is text with each readable record ID of ids (ReadableIDs),
// as it is or quoted, replaced by the hashed ID recordIDAttr gives it. An
// ID without '#' is none an engine makes: its text is left alone, not
// every mention of a short string rewritten.
func withoutKeys(ctx context.Context, text string, ids []string) string {
	return idtext.Replace(text, ids, func(id string) (string, bool) {
		hashed := recordIDAttr(ctx, id).Value.AsString()
		return hashed, hashed != id && strings.Contains(id, "#")
	})
}
