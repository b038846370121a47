// Command relay is the sample's outbox relay: a Lambda function on a
// DynamoDB stream that sends the messages it carries
// (dynamostore/outbox.Relay), once per message within SQS FIFO's
// deduplication window. It reads either kind of stream: the payments
// table's (NEW_AND_OLD_IMAGES), whose completed records carry the
// messages the payment function published on them
// (outbox.PublishOnRecord), and an outbox table's, whose new items are
// messages (outbox.Publish). Its event source mapping wants
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
//	RECORD_KEY_ATTR, RECORD_STATUS_ATTR  optional: the names of the
//	                       record's partition key and status attribute on
//	                       the record table (outbox.RelayOptions.Record),
//	                       when they are not dynamostore's defaults (id,
//	                       status): the payments table names them
//	                       payment_id and record_status
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
		o.Record.KeyAttr = os.Getenv("RECORD_KEY_ATTR")
		o.Record.StatusAttr = os.Getenv("RECORD_STATUS_ATTR")
	}))
}
