package lambdakitotel

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// WrapBatch returns fn with a span around each invocation: "process
// <queue>" (or "process" when the records come from several queues), kind
// CONSUMER, with the messaging attributes of the OpenTelemetry conventions
// for SQS-triggered Lambda functions (messaging.system aws_sqs,
// messaging.batch.message_count, messaging.destination.name, faas.trigger,
// faas.invocation_id), QueueARNKey, FailedCountKey, and a link to each
// record's sender when SQS carried one (the AWSTraceHeader system
// attribute; up to 128). A partial batch response is not an error; the
// span's status is Error only when fn returns one (ErrAllFailed, for
// instance).
//
// The record spans that Middleware makes are its children. After the span
// ended, WrapBatch flushes the provider (see Options.Flush) before it
// returns, so that nothing is left in a buffer when Lambda freezes the
// environment.
func WrapBatch(fn lambdakit.BatchFunc, optFns ...func(*Options)) lambdakit.BatchFunc {
	o := newOptions(optFns)
	tracer := o.tracer()
	return func(ctx context.Context, event events.SQSEvent) (resp events.SQSEventResponse, err error) {
		name, arn := source(event.Records)
		attrs := processAttrs(semconv.MessagingBatchMessageCount(len(event.Records)))
		if arn != "" {
			attrs = append(attrs, semconv.MessagingDestinationName(name), QueueARNKey.String(arn))
		}
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			if lc.AwsRequestID != "" {
				attrs = append(attrs, semconv.FaaSInvocationID(lc.AwsRequestID))
			}
			if lc.InvokedFunctionArn != "" {
				attrs = append(attrs, semconv.AWSLambdaInvokedARN(lc.InvokedFunctionArn))
				if acct := arnField(lc.InvokedFunctionArn, 4); acct != "" {
					attrs = append(attrs, semconv.CloudAccountID(acct))
				}
			}
		}
		var links []trace.Link
		for i := range event.Records {
			if len(links) == maxLinks {
				break
			}
			if l, ok := senderLink(&event.Records[i]); ok {
				links = append(links, l)
			}
		}
		spanName := valueOperationProcess
		if arn != "" {
			spanName += " " + name
		}
		ctx, span := tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrs...), trace.WithLinks(links...))

		returned := false
		defer func() {
			if !returned {
				// fn panicked: end the span (and flush it) on the way
				// out, and let the panic go on to the runtime.
				span.SetStatus(codes.Error, "batch handler panicked")
			}
			span.End()
			o.flush(ctx)
		}()
		resp, err = fn(ctx, event)
		returned = true
		span.SetAttributes(FailedCountKey.Int(len(resp.BatchItemFailures)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(semconv.ErrorTypeKey.String(batchErrorType(err)))
		}
		return resp, err
	}
}

// source returns the queue name and ARN the records came from, or empty
// strings when they came from several (or none said).
func source(recs []events.SQSMessage) (name, arn string) {
	for i := range recs {
		a := recs[i].EventSourceARN
		switch {
		case a == "":
			return "", ""
		case arn == "":
			arn = a
		case a != arn:
			return "", ""
		}
	}
	return queueName(arn), arn
}

// queueName is the last field of an SQS ARN
// (arn:aws:sqs:region:account:name).
func queueName(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// arnField returns the n-th colon-separated field of an ARN (4 is the
// account), or "" when there is none.
func arnField(arn string, n int) string {
	parts := strings.SplitN(arn, ":", n+2)
	if len(parts) <= n || !strings.HasPrefix(arn, "arn:") {
		return ""
	}
	return parts[n]
}

func batchErrorType(err error) string {
	if errors.Is(err, lambdakit.ErrAllFailed) {
		return "AllFailed"
	}
	return errorTypeOther
}

// flush exports what the provider holds, bounded by FlushTimeout and by
// half the time left before the invocation deadline. A failed flush costs
// spans, never the invocation.
func (o *Options) flush(ctx context.Context) {
	if o.DisableFlush || o.Flush == nil {
		return
	}
	timeout := o.FlushTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline)/2)
	}
	if timeout <= 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_ = o.Flush(fctx)
}
