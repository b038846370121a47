package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
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
var errNotCharged = errors.New("ledger: not a payment.charged event the ledger can record")

// check names the first rule e breaks, or returns nil. An event that
// breaks one is refused before its entry exists: recorded, it would hold
// its payment's entry for good (an amount of 0, say), and the real event
// would then be refused as another payload for that payment. The values
// are not repeated, only the type, so that a body stays out of the logs.
// (A non-integer amount never gets here: Typed refuses to decode it.)
func check(e charged) error {
	var rule string
	switch {
	case e.Type != "payment.charged":
		rule = fmt.Sprintf("type is %q", e.Type)
	case e.OrderID == "":
		rule = "no order_id"
	case e.CustomerID == "":
		rule = "no customer_id"
	case e.Amount <= 0:
		rule = "amount must be a positive integer in minor units"
	case e.Currency == "":
		rule = "no currency"
	case e.ChargeID == "":
		rule = "no charge_id"
	default:
		return nil
	}
	return lambdakit.Permanent(fmt.Errorf("%w: %s (payment %q)", errNotCharged, rule, e.PaymentID))
}

// options make each entry one request: the entry is its idempotency
// record's own item, "entry#<payment_id>", created completed by one
// conditional PutItem, and kept forever (a ledger forgets nothing).
//
// The entry keeps the hash of its whole event (PayloadBody, compared as
// JSON values), so that another payment.charged for a recorded payment
// (another charge or amount) fails with ErrPayloadMismatch, poison,
// instead of passing as a duplicate. Not PayloadFields: its hash of the
// same event differs, and every entry written so far would refuse a
// redelivery of its own event. The producer sends each event once, with
// one body, so the whole body is what defines it.
func options(o *lambdakit.Options) {
	o.Prefix, o.ReadableIDs, o.TTL, o.StagedOnly = "entry", true, lambdakit.NeverExpire, true
	o.Payload = lambdakit.PayloadBody
}

// recorded is the body of a ledger.recorded message, the downstream
// event of an entry.
type recorded struct {
	Type       string `json:"type"`
	PaymentID  string `json:"payment_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	ChargeID   string `json:"charge_id"`
}

// ledger records the entries, and with eventsQueue set publishes a
// ledger.recorded for each, on the entry's own item.
type ledger struct {
	eventsQueue string
}

// record declares the ledger entry of e. Under StagedOnly it may run more
// than once for one payment, and at the same time as a duplicate in
// another container: it has no effect but the item it declares, which
// only the first commit writes. Its event, if any, rides on that same
// item (outbox.PublishOnRecord): the one PutItem that creates the entry,
// 1 write unit while the item stays under 1 KB; the relay sends it from
// the table's stream.
func (l ledger) record(ctx context.Context, e charged) error {
	if err := check(e); err != nil {
		return err
	}
	if l.eventsQueue != "" {
		body, err := json.Marshal(recorded{Type: "ledger.recorded", PaymentID: e.PaymentID, CustomerID: e.CustomerID,
			Amount: e.Amount, Currency: e.Currency, ChargeID: e.ChargeID})
		if err != nil {
			return err
		}
		// Grouped by customer on a FIFO queue, as the payment's event. The
		// charge ID is the gateway's and may hold a character SQS refuses
		// in a body (U+FFFE, which encoding/json leaves as it is): escaped,
		// or the outbox would refuse the message and the entry with it.
		if err := outbox.PublishOnRecord(ctx, outbox.Message{QueueURL: l.eventsQueue, GroupID: e.CustomerID,
			Name: "ledger.recorded", Body: awsrules.EscapeJSON(string(body)), Attributes: map[string]string{"type": "ledger.recorded"}}); err != nil {
			return err
		}
	}
	return dynamostore.SetItem(ctx, map[string]types.AttributeValue{
		"customer_id": &types.AttributeValueMemberS{Value: e.CustomerID},
		"order_id":    &types.AttributeValueMemberS{Value: e.OrderID},
		"amount":      &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Amount, 10)},
		"currency":    &types.AttributeValueMemberS{Value: e.Currency},
		"charge_id":   &types.AttributeValueMemberS{Value: e.ChargeID},
	})
}

// newHandler is the function's handler on store, the ledger table; with
// eventsQueue set, each entry publishes ledger.recorded there. Each
// event's key is its payment_id: the relay and SQS may both deliver one
// event more than once.
func newHandler(store *dynamostore.Store, eventsQueue string, optFns ...func(*lambdakit.Options)) lambdakit.BatchFunc {
	return lambdakit.Batch(handler(store, eventsQueue, optFns...))
}

// handler is newHandler's record handler, before the batch.
func handler(store *dynamostore.Store, eventsQueue string, optFns ...func(*lambdakit.Options)) lambdakit.Handler {
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), append([]func(*lambdakit.Options){options}, optFns...)...)
	return h(lambdakit.Typed(ledger{eventsQueue: eventsQueue}.record))
}
