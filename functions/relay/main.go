// Command relay is the sample's outbox relay: a Lambda function on an
// outbox table's DynamoDB stream that sends each new item to its queue
// (dynamostore/outbox.Relay), once per item within SQS FIFO's
// deduplication window. Its event source mapping wants
// FunctionResponseTypes [ReportBatchItemFailures], StartingPosition
// TRIM_HORIZON, MaximumRetryAttempts, BisectBatchOnFunctionError and an
// on-failure destination.
//
// Environment:
//
//	DEAD_LETTER_QUEUE_URL  optional: where an item that can never be sent
//	                       goes (outbox.RelayOptions.DeadLetterQueueURL);
//	                       the template gives the mapping's on-failure
//	                       destination
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/dynamostore/outbox"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatalf("relay: AWS configuration: %v", err)
	}
	lambda.Start(outbox.Relay(sqs.NewFromConfig(cfg), func(o *outbox.RelayOptions) {
		o.DeadLetterQueueURL = os.Getenv("DEAD_LETTER_QUEUE_URL")
	}))
}
