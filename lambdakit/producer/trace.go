package producer

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// traceHeaderName is the HTTP header from which SQS sets a sent message's
// AWSTraceHeader, which X-Ray follows from sender to consumer and Lambda's
// recursive loop detection reads.
const traceHeaderName = "X-Amzn-Trace-Id"

// WithTraceHeader is an option of an SQS call that sends the invocation's
// X-Ray trace header, from ctx (lambdakit.TraceHeader), on a call that has
// none: client.SendMessage(ctx, in, producer.WithTraceHeader(ctx)). The
// SDK adds it only from _X_AMZN_TRACE_ID, which aws-lambda-go leaves unset
// when a process runs several invocations at once
// (AWS_LAMBDA_MAX_CONCURRENCY, Lambda Managed Instances): without it, a
// message sent there loses its trace. Producer and DeadLetterQueue use it
// on every send.
func WithTraceHeader(ctx context.Context) func(*sqs.Options) {
	header := lambdakit.TraceHeader(ctx)
	return func(o *sqs.Options) {
		if header == "" {
			return
		}
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Build.Add(middleware.BuildMiddlewareFunc("lambdakitTraceHeader",
				func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
					if req, ok := in.Request.(*smithyhttp.Request); ok && req.Header.Get(traceHeaderName) == "" {
						req.Header.Set(traceHeaderName, header)
					}
					return next.HandleBuild(ctx, in)
				}), middleware.Before)
		})
	}
}
