package lambdakitotel

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// processAttrs returns the attributes that the invocation's span and each
// record's share, SQS messages being processed by a function, then more.
func processAttrs(more ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		semconv.MessagingSystemAWSSQS,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName(valueOperationProcess),
		semconv.FaaSTriggerPubSub)
	return append(attrs, more...)
}

// Middleware returns a lambdakit.Middleware that makes one span per record:
// "process <queue>", kind CONSUMER, a child of the invocation span (see
// WrapBatch), with messaging.message.id, the message group and receive
// count, a link to the sender when SQS carried one, and OutcomeKey:
// processed, duplicate, or failed with ReasonKey and error.type naming why
// (the span's status is then Error).
//
// Put it OUTSIDE Idempotent (earlier in lambdakit.Chain): a duplicate is
// answered inside Idempotent without reaching the handler, so only a
// middleware around Idempotent sees it, through lambdakit.Replayed. Store
// spans (WrapStore) are children of the record span. Outside lambdakit.Batch
// Replayed reports false, so every success counts as processed.
func Middleware(optFns ...func(*Options)) lambdakit.Middleware {
	o := newOptions(optFns)
	tracer := o.tracer()
	return func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) (result []byte, err error) {
			spanName := valueOperationProcess
			attrs := processAttrs(semconv.MessagingMessageID(msg.MessageId), semconv.MessagingMessageBodySize(len(msg.Body)))
			if arn := msg.EventSourceARN; arn != "" {
				name := queueName(arn)
				spanName += " " + name
				attrs = append(attrs, semconv.MessagingDestinationName(name), QueueARNKey.String(arn))
			}
			if g := msg.Attributes["MessageGroupId"]; g != "" {
				attrs = append(attrs, MessageGroupKey.String(g))
			}
			if n, err := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"]); err == nil {
				attrs = append(attrs, ReceiveCountKey.Int(n))
			}
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
			if l, ok := senderLink(msg); ok {
				opts = append(opts, trace.WithLinks(l))
			}
			ctx, span := tracer.Start(ctx, spanName, opts...)

			returned := false
			defer func() {
				if !returned {
					// A panic or runtime.Goexit: Batch fails the
					// record as a handler error. Not recovered here,
					// so that Batch logs the panic's own stack.
					span.SetAttributes(OutcomeKey.String(OutcomeFailed), ReasonKey.String(string(lambdakit.ReasonHandlerError)),
						semconv.ErrorTypeKey.String(string(lambdakit.ReasonHandlerError)))
					span.SetStatus(codes.Error, "handler did not return (panic or runtime.Goexit)")
				}
				span.End()
			}()
			result, err = next.Handle(ctx, msg)
			returned = true
			switch {
			case err != nil:
				reason := string(reasonOf(ctx, err))
				span.SetAttributes(OutcomeKey.String(OutcomeFailed), ReasonKey.String(reason), semconv.ErrorTypeKey.String(reason))
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			case lambdakit.Replayed(ctx):
				span.SetAttributes(OutcomeKey.String(OutcomeDuplicate))
			default:
				span.SetAttributes(OutcomeKey.String(OutcomeProcessed))
			}
			return result, err
		})
	}
}

// reasonOf is lambdakit.ReasonOf for an error that came back on the
// record's context ctx: one that came after ctx ended is marked as Batch
// marks it, so that the span's reason is the log line's.
func reasonOf(ctx context.Context, err error) lambdakit.Reason {
	if ctx.Err() != nil && !errors.Is(err, lambdakit.ErrCancelledAtDeadline) {
		err = fmt.Errorf("%w: %w", lambdakit.ErrCancelledAtDeadline, err)
	}
	return lambdakit.ReasonOf(err)
}
