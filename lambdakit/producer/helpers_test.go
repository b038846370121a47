package producer_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sqsClient returns a client for moto, or for endpoint when it is not "".
func sqsClient(t *testing.T, endpoint string) *sqs.Client {
	cfg := moto.Config(t)
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
}

func bodies(msgs []types.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = aws.ToString(m.Body)
	}
	return out
}

// asEvent is the message as Lambda hands it to the consumer.
func asEvent(m types.Message, queueARN string) *events.SQSMessage {
	ev := &events.SQSMessage{
		MessageId:      aws.ToString(m.MessageId),
		Body:           aws.ToString(m.Body),
		Attributes:     m.Attributes,
		EventSource:    "aws:sqs",
		EventSourceARN: queueARN,
	}
	return ev
}

func payment(id, group string) producer.Message {
	return producer.Message{Body: fmt.Sprintf(`{"payment_id":%q,"customer_id":%q,"amount":100}`, id, group)}
}

// lambdakitKey is the consumer's KeyFunc, which Options.Key is given so
// that a message's deduplication ID derives from its idempotency key.
var lambdakitKey = lambdakit.KeyFromField("payment_id")

// fifoOptions are the options of the sample: key payment_id, group
// customer_id.
func fifoOptions(o *producer.Options) {
	o.Key = lambdakitKey
	o.Group = producer.GroupFromField("customer_id")
}

// sleeps records the waits a producer asked for, without waiting.
type sleeps struct{ got []time.Duration }

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.got = append(s.got, d)
	return ctx.Err()
}

func mustSend(t *testing.T, p *producer.Producer, msgs ...producer.Message) []producer.Result {
	t.Helper()
	res, err := p.Send(ctxFor(t), msgs)
	if err != nil {
		for i, r := range res {
			if r.Err != nil {
				t.Errorf("message %d: %v", i, r.Err)
			}
		}
		t.Fatalf("Send: %v", err)
	}
	return res
}

// tracedClient returns a client for moto that records the X-Amzn-Trace-Id
// header of each request it sends.
func tracedClient(t *testing.T) (*sqs.Client, func() []string) {
	return testenv.TracedSQS(moto.Config(t))
}

// invocationCtx is the context of an invocation with the trace header
// header, as aws-lambda-go makes it when it runs several invocations at
// once: the header is in the context, and _X_AMZN_TRACE_ID is not set.
func invocationCtx(t *testing.T, header string) context.Context {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "payments")
	t.Setenv("_X_AMZN_TRACE_ID", "")
	os.Unsetenv("_X_AMZN_TRACE_ID")
	ctx := lambdacontext.NewContext(ctxFor(t), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	//lint:ignore SA1029 the key aws-lambda-go puts the trace header under
	return context.WithValue(ctx, "x-amzn-trace-id", header)
}
