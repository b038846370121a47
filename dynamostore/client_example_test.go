package dynamostore_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// A client with the store's bounds for a Lambda function, one of them
// changed: a function with many records in flight may want more
// connections. A call still throttled after the attempts fails with
// lambdakit.ErrThrottled.
func ExampleWithLambdaDefaults() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg, dynamostore.WithLambdaDefaults(func(o *dynamostore.ClientOptions) {
		o.MaxConns = 128
	}))
	store, err := dynamostore.New(db, os.Getenv("IDEMPOTENCY_TABLE"))
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = store.Release(ctx, "orders#0123", "lease")
	if errors.Is(err, lambdakit.ErrThrottled) {
		log.Print("DynamoDB is throttling; the record will come back later")
	}
}
