package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// charged is the payment.charged event functions/payment publishes
// through its outbox, as this consumer reads it. The JSON is the contract:
// the consumer does not import the producer's type, so that each deploys
// on its own.
type charged struct {
	Type       string `json:"type"`
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	ChargeID   string `json:"charge_id"`
}

// errNotCharged is the failure of an event that is not a payment.charged
// this function can record: no redelivery mends it.
var errNotCharged = errors.New("ledger: not a payment.charged event with a customer and a charge")

// options make each entry one request: the entry is its idempotency
// record's own item, "entry#<payment_id>", created completed by one
// conditional PutItem, and kept forever (a ledger forgets nothing).
func options(o *lambdakit.Options) {
	o.Prefix, o.ReadableIDs, o.TTL, o.StagedOnly = "entry", true, lambdakit.NeverExpire, true
}

// record declares the ledger entry of e. Under StagedOnly it may run more
// than once for one payment, and at the same time as a duplicate in
// another container: it has no effect but the item it declares, which
// only the first commit writes.
func record(ctx context.Context, e charged) error {
	if e.Type != "payment.charged" || e.CustomerID == "" || e.ChargeID == "" || e.Currency == "" {
		return lambdakit.Permanent(fmt.Errorf("%w (type %q, payment %q)", errNotCharged, e.Type, e.PaymentID))
	}
	return dynamostore.SetItem(ctx, map[string]types.AttributeValue{
		"customer_id": &types.AttributeValueMemberS{Value: e.CustomerID},
		"order_id":    &types.AttributeValueMemberS{Value: e.OrderID},
		"amount":      &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Amount, 10)},
		"currency":    &types.AttributeValueMemberS{Value: e.Currency},
		"charge_id":   &types.AttributeValueMemberS{Value: e.ChargeID},
	})
}

// newHandler is the function's handler on store, the ledger table. Each
// event's key is its payment_id: the outbox's relay and SQS may both
// deliver one event more than once.
func newHandler(store *dynamostore.Store, optFns ...func(*lambdakit.Options)) lambdakit.BatchFunc {
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), append([]func(*lambdakit.Options){options}, optFns...)...)
	return lambdakit.Batch(h(lambdakit.Typed(record)))
}
