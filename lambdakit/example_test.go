package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

type Order struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

// A batch handler whose records are idempotent on the order_id field. In a
// function, pass the BatchFunc to lambda.Start and use dynamostore.New for
// the store.
func Example() {
	store := &lambdakittest.MemoryStore{} // dynamostore.New(dynamodb.NewFromConfig(cfg), table)
	ship := lambdakit.Typed(func(ctx context.Context, o Order) error {
		fmt.Println("shipping", o.OrderID)
		return nil
	})
	handler := lambdakit.Batch(
		lambdakit.Idempotent(store, lambdakit.KeyFromField("order_id"))(ship),
	)

	first := lambdakittest.Message(`{"order_id":"o-1","total":30}`)
	again := lambdakittest.Message(`{"order_id":"o-1","total":30}`) // a producer's retry
	bad := lambdakittest.Message(`{"total":5}`)                     // no key: fails closed
	resp, err := handler(context.Background(), lambdakittest.Event(first, again, bad))
	fmt.Println(len(resp.BatchItemFailures), "failed:", resp.BatchItemFailures[0].ItemIdentifier == bad.MessageId, err)
	// Output:
	// shipping o-1
	// 1 failed: true <nil>
}

// KeyFromFields builds a composite key with a fixed prefix.
func ExampleKeyFromFields() {
	key := lambdakit.KeyFromFields("Order", "aggregate_id", "message_id")
	msg := lambdakittest.Message(`{"aggregate_id":"A-7","message_id":"m-42","total":3}`)
	k, err := key(&msg)
	fmt.Println(k, err)
	// Output: Order:A-7:m-42 <nil>
}

// Once makes any function idempotent, not only queue records: here
// an API handler whose client sends an Idempotency-Key header. DoTyped keeps
// the request as the payload and the result as JSON.
func ExampleDoTyped() {
	store := &lambdakittest.MemoryStore{} // dynamostore.New(dynamodb.NewFromConfig(cfg), table)
	engine := lambdakit.NewOnce(store, func(o *lambdakit.Options) { o.Prefix = "orders-api" })
	type Order struct{ Item string }
	type Receipt struct{ Number int }
	next := 0
	place := func(ctx context.Context, o Order) (Receipt, error) {
		next++
		fmt.Println("placing", o.Item)
		return Receipt{Number: next}, nil
	}
	for range 2 { // the client retries after a timeout
		r, err := lambdakit.DoTyped(context.Background(), engine, "key-from-the-header", Order{Item: "book"}, place)
		fmt.Println("receipt", r.Number, err)
	}
	// Output:
	// placing book
	// receipt 1 <nil>
	// receipt 1 <nil>
}

// EffectDone marks the recovery point: the card is charged, so the
// failure that follows does not release the key, and the retry does not
// charge again. Both calls fail permanently, to reconcile.
func ExampleEffectDone() {
	store := &lambdakittest.MemoryStore{} // dynamostore.New(dynamodb.NewFromConfig(cfg), table)
	engine := lambdakit.NewOnce(store, func(o *lambdakit.Options) { o.Prefix = "payments" })
	pay := func(ctx context.Context) ([]byte, error) {
		fmt.Println("charging p-1")
		lambdakit.EffectDone(ctx, "charge ch_1")
		return nil, errors.New("ledger unavailable")
	}
	for range 2 { // the message comes back
		_, err := engine.Do(context.Background(), "p-1", nil, pay)
		fmt.Println(errors.Is(err, lambdakit.ErrFailedAfterEffect), lambdakit.IsPermanent(err))
	}
	// Output:
	// charging p-1
	// true true
	// true true
}

// A response hook marks a replayed answer with a header, so that the
// client of an API can tell it from a fresh one.
func ExampleOptions_responseHook() {
	type Response struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers,omitempty"`
		Body       string            `json:"body"`
	}
	store := &lambdakittest.MemoryStore{} // dynamostore.New(dynamodb.NewFromConfig(cfg), table)
	engine := lambdakit.NewOnce(store, func(o *lambdakit.Options) {
		o.Prefix = "orders-api"
		o.ResponseHook = func(ctx context.Context, result []byte, rec lambdakit.IdempotencyRecord) ([]byte, error) {
			if result == nil {
				return nil, nil // completed without its result (ErrResultNotStorable)
			}
			var r Response
			if err := json.Unmarshal(result, &r); err != nil {
				return nil, err
			}
			r.Headers = map[string]string{"Idempotency-Replayed": "true"}
			return json.Marshal(r)
		}
	})
	place := func(ctx context.Context, item string) (Response, error) {
		return Response{StatusCode: 201, Body: "placed " + item}, nil
	}
	for range 2 { // the client retries after a timeout
		r, err := lambdakit.DoTyped(context.Background(), engine, "key-from-the-header", "book", place)
		fmt.Println(r.StatusCode, r.Body, r.Headers, err)
	}
	// Output:
	// 201 placed book map[] <nil>
	// 201 placed book map[Idempotency-Replayed:true] <nil>
}
