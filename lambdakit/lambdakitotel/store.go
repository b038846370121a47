package lambdakitotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// Store operations, as StoreOperationKey names them and the span names end.
const (
	opAcquire    = "acquire"
	opComplete   = "complete"
	opRelease    = "release"
	opGetRecords = "get_records"
)

// WrapStore returns store with a span around each request:
// "lambdakit.store.<operation>" (acquire, complete, release, get_records),
// kind INTERNAL (an instrumented AWS SDK client adds its own CLIENT span
// below it), with StoreOperationKey and RecordIDKey (the record's ID, never
// the raw key), AcquiredKey and ExistingStatusKey for an acquire, and for a
// failure an Error status with error.type: LeaseLost (and LeaseLostKey
// true), Throttled, ResultNotStorable, StagingUnsupported, or _OTHER.
//
// The returned store implements lambdakit.BatchGetter exactly when store
// does, so that the read ahead of re-driven batches keeps working through
// it.
func WrapStore(store lambdakit.Store, optFns ...func(*Options)) lambdakit.Store {
	o := newOptions(optFns)
	s := &tracedStore{next: store, tracer: o.tracer()}
	if g, ok := store.(lambdakit.BatchGetter); ok {
		return &tracedBatchStore{tracedStore: s, getter: g}
	}
	return s
}

type tracedStore struct {
	next   lambdakit.Store
	tracer trace.Tracer
}

// tracedBatchStore is a tracedStore over a store that can read ahead.
type tracedBatchStore struct {
	*tracedStore
	getter lambdakit.BatchGetter
}

var (
	_ lambdakit.Store       = (*tracedStore)(nil)
	_ lambdakit.BatchGetter = (*tracedBatchStore)(nil)
)

func (s *tracedStore) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "lambdakit.store."+op, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(attrs, StoreOperationKey.String(op))...))
}

// Acquire implements lambdakit.Store.
func (s *tracedStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	ctx, span := s.start(ctx, opAcquire, RecordIDKey.String(rec.ID))
	defer span.End()
	existing, acquired, err := s.next.Acquire(ctx, rec, now)
	if err != nil {
		fail(span, err)
		return existing, acquired, err
	}
	span.SetAttributes(AcquiredKey.Bool(acquired))
	if !acquired && existing.Status != "" {
		span.SetAttributes(ExistingStatusKey.String(string(existing.Status)))
	}
	return existing, acquired, nil
}

// Complete implements lambdakit.Store.
func (s *tracedStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	ctx, span := s.start(ctx, opComplete, RecordIDKey.String(rec.ID), StagedWritesKey.Int(len(rec.Staged)))
	defer span.End()
	err := s.next.Complete(ctx, rec)
	if err != nil {
		fail(span, err)
	}
	return err
}

// Release implements lambdakit.Store.
func (s *tracedStore) Release(ctx context.Context, id, lease string) error {
	ctx, span := s.start(ctx, opRelease, RecordIDKey.String(id))
	defer span.End()
	err := s.next.Release(ctx, id, lease)
	if err != nil {
		fail(span, err)
	}
	return err
}

// GetRecords implements lambdakit.BatchGetter.
func (s *tracedBatchStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	ctx, span := s.start(ctx, opGetRecords, RequestedKey.Int(len(ids)))
	defer span.End()
	recs, err := s.getter.GetRecords(ctx, ids)
	if err != nil {
		fail(span, err)
		return recs, err
	}
	span.SetAttributes(FoundKey.Int(len(recs)))
	return recs, nil
}

// fail marks a store span failed. A lost lease is marked apart: it means
// another owner took the record over, which an alarm should hear of.
func fail(span trace.Span, err error) {
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
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
