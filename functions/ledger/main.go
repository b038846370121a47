// Command ledger is a sample consumer of the payment.charged events that
// functions/payment publishes through its outbox (functions/relay sends
// them to the events queue). It keeps a per-customer ledger: one entry per
// charged payment, whose idempotency record is the entry's own item, so
// that each event costs one DynamoDB request and one write unit
// (lambdakit.Options.StagedOnly with dynamostore.SetItem). A duplicate
// costs one failed conditional write, or nothing in a warm container.
//
// What it records: an event of type "payment.charged" with an order_id, a
// customer_id, a currency, a charge_id and an amount that is a positive
// integer (minor units). Any other event fails permanently before its
// entry exists (lambdakit.Permanent, or lambdakit's poison for a body that
// does not decode), so that it never takes its payment's entry from the
// real event. Each entry keeps the hash of its whole event: a redelivery
// of that event (however its JSON is spelled) is a duplicate, answered
// with no write; another payment.charged for the same payment (another
// charge_id or amount) fails with lambdakit.ErrPayloadMismatch, poison.
// Both failures are logged at ERROR with their reason code (Permanent,
// PayloadMismatch), are never retried into an entry, and reach the events
// queue's dead-letter queue through its redrive policy; the entry stays
// as it was.
//
// Environment:
//
//	LEDGER_TABLE  the ledger's DynamoDB table (required): partition key
//	              "id" (string), items "entry#<payment_id>" with
//	              customer_id, order_id, amount, currency and charge_id; a
//	              global secondary index on customer_id would list a
//	              customer's entries, at one more write unit per entry
//	LEDGER_EVENTS_QUEUE_URL  optional, off when empty: each new entry
//	              publishes "ledger.recorded" to this queue, grouped by
//	              customer_id, on the entry's own item (its attribute
//	              "messages", outbox.PublishOnRecord): still one PutItem,
//	              one write unit while the entry stays under 1 KB. The
//	              ledger table then needs a stream of new and old images,
//	              and a relay (functions/relay) mapped on it that may send
//	              to the queue
//
// template.yaml declares it (LedgerFunction, on the events queue).
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
)

func main() {
	table := os.Getenv("LEDGER_TABLE")
	if table == "" {
		log.Fatal("ledger: LEDGER_TABLE is not set")
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatalf("ledger: AWS configuration: %v", err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg, dynamostore.WithLambdaDefaults()), table)
	if err != nil {
		log.Fatalf("ledger: LEDGER_TABLE: %v", err)
	}
	lambda.Start(newHandler(store, os.Getenv("LEDGER_EVENTS_QUEUE_URL")))
}
