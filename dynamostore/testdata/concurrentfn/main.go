// Command concurrentfn is a Lambda bootstrap for the tests that run several
// invocations at once in one process (AWS_LAMBDA_MAX_CONCURRENCY, as on
// Lambda Managed Instances): an SQS batch function, idempotent on a
// DynamoDB table (TABLE), keyed by the body's "id", with detailed metrics.
// Its handler logs "handled" with the message ID each time it runs, and
// panics on a body whose "id" is "panic".
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatalf("concurrentfn: AWS configuration: %v", err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("TABLE"))
	if err != nil {
		log.Fatalf("concurrentfn: %v", err)
	}
	logger := lambdakit.NewLogger(os.Stderr)
	handle := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		var body struct{ ID string }
		_ = json.Unmarshal([]byte(msg.Body), &body)
		if body.ID == "panic" {
			panic("concurrentfn: told to panic")
		}
		logger.InfoContext(ctx, "handled", "messageId", msg.MessageId)
		// Long enough for invocations, and duplicates, to overlap.
		time.Sleep(20 * time.Millisecond)
		return nil, nil
	})
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) { o.Logger = logger })(handle)
	lambda.Start(lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = logger
		o.DetailedMetrics = true
	}))
}
