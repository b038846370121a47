package dynamostore_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

type Payment struct {
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
}

// The common use: an SQS batch handler for lambda.Start whose records are
// idempotent on payment_id, with the records kept in DynamoDB.
func Example() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("IDEMPOTENCY_TABLE"))
	if err != nil {
		log.Fatal(err) // at start, not on the first message
	}
	charge := lambdakit.Typed(func(ctx context.Context, p Payment) error {
		log.Printf("charging %s: %d", p.PaymentID, p.Amount)
		return nil
	})
	idempotent := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"))
	lambda.Start(lambdakit.Batch(idempotent(charge)))
}

// A Store for a table that a Powertools function configured with
// key_attr="pk" shares.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idempotency", func(o *dynamostore.Options) {
		o.KeyAttr = "pk"
	})
	if err != nil {
		log.Fatal(err)
	}
	var _ lambdakit.Store = store
}

// A handler whose only effect is a DynamoDB write stages it, so that the
// write and the idempotency record commit together or not at all.
func ExampleStage() {
	handler := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("payments"),
			Item: map[string]types.AttributeValue{
				"id":   &types.AttributeValueMemberS{Value: msg.MessageId},
				"body": &types.AttributeValueMemberS{Value: msg.Body},
			},
		}})
		if err != nil {
			return nil, err
		}
		return []byte(`{"status":"accepted"}`), nil
	})
	_ = handler // wrap it with lambdakit's idempotency middleware and a dynamostore.Store
}
