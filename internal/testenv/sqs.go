package testenv

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TracedSQS returns an SQS client on cfg that records the X-Amzn-Trace-Id
// header of each request it sends, and a function that returns them in
// the order sent. SQS sets a message's AWSTraceHeader from that header;
// moto does not, so tests read the header where AWS would.
func TracedSQS(cfg aws.Config) (*sqs.Client, func() []string) {
	var mu sync.Mutex
	var sent []string
	record := middleware.FinalizeMiddlewareFunc("recordTraceHeader",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok {
				mu.Lock()
				sent = append(sent, req.Header.Get("X-Amzn-Trace-Id"))
				mu.Unlock()
			}
			return next.HandleFinalize(ctx, in)
		})
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error { return s.Finalize.Add(record, middleware.After) })
	})
	return client, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
}

// Queue creates an SQS queue named for the test and returns its URL: a FIFO
// queue, whose messages need their own deduplication IDs, when fifo; attrs
// come on top.
func Queue(tb testing.TB, client *sqs.Client, fifo bool, attrs map[string]string) string {
	tb.Helper()
	name := Name(tb)
	all := map[string]string{}
	if fifo {
		name += ".fifo"
		all["FifoQueue"], all["ContentBasedDeduplication"] = "true", "false"
	}
	for k, v := range attrs {
		all[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: all})
	if err != nil {
		tb.Fatalf("testenv: CreateQueue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

// drainReceives bounds Drain.
const drainReceives = 200

// Drain takes every message off the queue, in the order SQS hands them out,
// with their system and message attributes. It deletes each receive's
// messages before the next, so that a FIFO group's later messages come, and
// fails tb if the queue still has messages after 200 receives.
func Drain(tb testing.TB, client *sqs.Client, queueURL string) []types.Message {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var all []types.Message
	for range drainReceives {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(queueURL),
			MaxNumberOfMessages:         10,
			VisibilityTimeout:           300,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			tb.Fatalf("testenv: ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
		del := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL)}
		for i, m := range out.Messages {
			del.Entries = append(del.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if _, err := client.DeleteMessageBatch(ctx, del); err != nil {
			tb.Fatalf("testenv: DeleteMessageBatch: %v", err)
		}
	}
	tb.Fatalf("testenv: %s still had messages after %d receives", queueURL, drainReceives)
	return nil
}
