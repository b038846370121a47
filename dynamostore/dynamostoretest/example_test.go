package dynamostoretest_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Order is what the consumer of these examples receives.
type Order struct {
	OrderID string `json:"order_id"`
}

// newShipping is a user's consumer: it ships each order once, however
// often SQS delivers it, and counts the shipments in shipped.
func newShipping(store lambdakit.Store, shipped *atomic.Int32) lambdakit.BatchFunc {
	ship := lambdakit.Typed(func(ctx context.Context, o Order) error {
		shipped.Add(1)
		return nil
	})
	return lambdakit.Batch(lambdakit.Idempotent(store, lambdakit.KeyFromField("order_id"))(ship))
}

// A consumer on a local DynamoDB: an order delivered twice is shipped
// once. In a test, dynamostoretest.Start(t) and db.NewTable(t) do the
// first steps in two lines, and stop the server when the test ends.
func Example() {
	db, err := dynamostoretest.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	table := "example-" + rand.Text()
	if err := dynamostore.CreateTable(ctx, db.Client(), table); err != nil {
		fmt.Println(err)
		return
	}
	store, err := dynamostore.New(db.Client(), table)
	if err != nil {
		fmt.Println(err)
		return
	}

	var shipped atomic.Int32
	batch := newShipping(store, &shipped)
	msg := lambdakittest.Message(`{"order_id": "o-1"}`)
	for _, event := range []events.SQSEvent{lambdakittest.Event(msg), lambdakittest.Event(lambdakittest.Redelivery(msg))} {
		resp, err := batch(ctx, event)
		fmt.Printf("failed records: %d, error: %v\n", len(resp.BatchItemFailures), err)
	}
	fmt.Println("shipments:", shipped.Load())
	// Output:
	// failed records: 0, error: <nil>
	// failed records: 0, error: <nil>
	// shipments: 1
}
