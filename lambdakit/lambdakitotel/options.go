package lambdakitotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Options configures WrapBatch, Middleware and WrapStore. The zero value of
// each field means its default.
type Options struct {
	// TracerProvider makes the tracer. Default otel.GetTracerProvider(),
	// read when the wrapper is made; the global provider forwards to one
	// set later with otel.SetTracerProvider.
	TracerProvider trace.TracerProvider
	// Flush is what WrapBatch calls after the invocation span ended and
	// before it returns, so that the spans are exported before Lambda
	// freezes the execution environment. Default: the provider's
	// ForceFlush when it has one (the SDK's does; the global provider
	// does not, so pass the SDK's provider, or flush in Flush).
	Flush func(context.Context) error
	// DisableFlush turns the flush off, for a caller that flushes itself
	// (as otellambda.WithFlusher does).
	DisableFlush bool
	// FlushTimeout bounds the flush. Default 1s, and never more than half
	// the time left before the invocation deadline: a hung exporter must
	// not turn a batch that was answered into a timeout.
	FlushTimeout time.Duration
}

// InstrumentationName is the name of the tracer the wrappers use.
const InstrumentationName = "github.com/lambdakit/lambdakit/lambdakit/lambdakitotel"

// Attributes of lambdakit's own. The others are OpenTelemetry semantic
// conventions (messaging, FaaS, error.type), from the semconv package of the
// version the trace API itself imports, so they cost nothing more.
const (
	// OutcomeKey is what became of a record: OutcomeProcessed,
	// OutcomeDuplicate or OutcomeFailed.
	OutcomeKey = attribute.Key("lambdakit.idempotency.outcome")
	// ReasonKey says why a record failed, in the words of the batch's log
	// line (reasonCode) and metrics: InProgress, PayloadMismatch, NoKey,
	// HandlerError, Deadline, LeaseLost or StoreError.
	ReasonKey = attribute.Key("lambdakit.idempotency.reason")
	// RecordIDKey is the idempotency record's ID: the prefix and a
	// SHA-256 of the key, never the key. With Options.ReadableIDs, whose
	// record IDs hold the key, it is the ID the record would have
	// without them (lambdakit.RecordID), so the key stays out of traces
	// (the engine tells the wrapper its IDs are readable:
	// lambdakit.LoggedRecordID).
	RecordIDKey = attribute.Key("lambdakit.idempotency.record_id")
	// QueueARNKey is the ARN of the queue the records came from, when they
	// all came from one.
	QueueARNKey = attribute.Key("lambdakit.sqs.queue.arn")
	// FailedCountKey is how many records the batch reported failed.
	FailedCountKey = attribute.Key("lambdakit.batch.failed_count")
	// MessageGroupKey is a FIFO record's message group.
	MessageGroupKey = attribute.Key("lambdakit.sqs.message_group_id")
	// ReceiveCountKey is how many times SQS has delivered the record
	// (ApproximateReceiveCount).
	ReceiveCountKey = attribute.Key("lambdakit.sqs.receive_count")
	// StoreOperationKey is the store request: acquire, complete, release,
	// get_records, commit (Options.StagedOnly) or mark_effect
	// (Options.StoreEffect).
	StoreOperationKey = attribute.Key("lambdakit.store.operation")
	// AcquiredKey says whether an acquire took the lock, or a commit
	// created the record.
	AcquiredKey = attribute.Key("lambdakit.store.acquired")
	// ExistingStatusKey is the status of the live record that kept an
	// acquire from taking the lock, or a commit from creating the record
	// (COMPLETED or INPROGRESS).
	ExistingStatusKey = attribute.Key("lambdakit.store.existing_status")
	// LeaseLostKey is true on a store span whose request found the lease
	// taken over (lambdakit.ErrLeaseLost).
	LeaseLostKey = attribute.Key("lambdakit.store.lease_lost")
	// StagedWritesKey is how many staged writes a completion committed
	// with it.
	StagedWritesKey = attribute.Key("lambdakit.store.staged_writes")
	// RequestedKey and FoundKey are how many records a get_records asked
	// for and found.
	RequestedKey = attribute.Key("lambdakit.store.requested")
	FoundKey     = attribute.Key("lambdakit.store.found")
)

// Values of OutcomeKey.
const (
	OutcomeProcessed = "processed" // the handler ran and succeeded
	OutcomeDuplicate = "duplicate" // the key was completed before: the handler was skipped
	OutcomeFailed    = "failed"    // the record failed: see ReasonKey
)

// valueOperationProcess is messaging.operation.name, and the first word of
// the span names.
const valueOperationProcess = "process"

// errorTypeOther is error.type for a failure of no known kind.
var errorTypeOther = semconv.ErrorTypeOther.Value.AsString()

// maxLinks bounds the links of an invocation span: a batch of a standard
// queue may hold 10,000 records, and the SDK keeps 128 links a span by
// default anyway.
const maxLinks = 128

func newOptions(optFns []func(*Options)) Options {
	o := Options{FlushTimeout: time.Second}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.FlushTimeout <= 0 {
		o.FlushTimeout = time.Second
	}
	if o.Flush == nil {
		if f, ok := o.TracerProvider.(interface{ ForceFlush(context.Context) error }); ok {
			o.Flush = f.ForceFlush
		}
	}
	return o
}

func (o *Options) tracer() trace.Tracer {
	return o.TracerProvider.Tracer(InstrumentationName, trace.WithSchemaURL(semconv.SchemaURL))
}
