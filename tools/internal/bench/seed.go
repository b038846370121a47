package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A cold redelivery needs payments completed beforehand. Completing 10,000
// through the function takes over a minute on moto (two requests and a
// transaction each), so the harness writes the records the function would
// have left instead, 25 to a BatchWriteItem. They are made by lambdakit
// itself: its idempotency middleware, configured as functions/payment
// configures it, completes each payment in an in-memory store, and the
// records are copied from there into the payments table with the
// function's attribute names (PaymentRecordNames); the bare floor keeps
// its records the same way, and reads the same rows. The harness test checks the function's against records
// the real bootstrap wrote, and that a redelivery of them costs the
// function nothing but the read ahead: if the function's configuration
// drifts from paymentIdempotency, its records no longer match, and the
// test fails.

// paymentIdempotency is the idempotency middleware of functions/payment
// (its newHandler): key, prefix, payload fields, readable IDs and
// NeverExpire.
func paymentIdempotency(store lambdakit.Store) lambdakit.Middleware {
	return lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
		o.Prefix = "payment"
		o.ReadableIDs, o.TTL = true, lambdakit.NeverExpire
		o.Payload = lambdakit.PayloadFields("payment_id", "order_id", "customer_id", "amount", "currency")
		o.Logger = slog.New(slog.DiscardHandler)
	})
}

// PaymentRecordNames names the record's attributes on the ledger rows as
// functions/payment does: the key payment_id, the status record_status.
func PaymentRecordNames(o *dynamostore.Options) {
	o.KeyAttr, o.StatusAttr = "payment_id", "record_status"
}

// CompletedRecords returns the idempotency records the payment function
// leaves for msgs once it has charged them, by record ID.
func CompletedRecords(ctx context.Context, msgs []events.SQSMessage) (map[string]lambdakit.IdempotencyRecord, error) {
	store := &lambdakittest.MemoryStore{}
	n := 0
	charge := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		n++
		return []byte(`{"status":"CHARGED","charge_id":"ch_s` + strconv.Itoa(n) + `"}`), nil
	})
	h := paymentIdempotency(store)(charge)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range msgs {
		if _, err := h.Handle(ctx, &msgs[i]); err != nil {
			return nil, fmt.Errorf("bench: completing %s: %w", msgs[i].MessageId, err)
		}
	}
	return store.Records(), nil
}

// recordItem is rec as dynamostore stores it, with the attribute names
// of names (nil: dynamostore's defaults). A record kept forever has no
// expiration.
func recordItem(rec lambdakit.IdempotencyRecord, names func(*dynamostore.Options)) map[string]types.AttributeValue {
	rec = rec.Rounded()
	o := dynamostore.Options{KeyAttr: "id", StatusAttr: "status"}
	if names != nil {
		names(&o)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	item := map[string]types.AttributeValue{
		o.KeyAttr:                s(rec.ID),
		o.StatusAttr:             s(string(rec.Status)),
		"in_progress_expiration": n(rec.InProgressExpiration.UnixMilli()),
		"lease":                  s(rec.Lease),
	}
	if !rec.Expiration.IsZero() {
		item["expiration"] = n(rec.Expiration.Unix())
	}
	if rec.Validation != "" {
		item["validation"] = s(rec.Validation)
	}
	if rec.Data != nil {
		item["data"] = s(string(rec.Data))
	}
	return item
}

// SeedCompleted writes the records of msgs once charged into the payments
// table, on the ledger rows, where the payment function and the bare
// floor both keep them. Straight to moto (neither the meter nor the
// proxy's connection count sees it), 25 items a request, four requests at
// a time.
func (s *Stack) SeedCompleted(ctx context.Context, table string, msgs []events.SQSMessage) error {
	names := PaymentRecordNames
	recs, err := CompletedRecords(ctx, msgs)
	if err != nil {
		return err
	}
	var reqs [][]types.WriteRequest
	var cur []types.WriteRequest
	for _, rec := range recs {
		cur = append(cur, types.WriteRequest{PutRequest: &types.PutRequest{Item: recordItem(rec, names)}})
		if len(cur) == 25 {
			reqs, cur = append(reqs, cur), nil
		}
	}
	if len(cur) > 0 {
		reqs = append(reqs, cur)
	}
	db := dynamodb.NewFromConfig(s.Moto.AWSConfig())
	const workers = 4
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(reqs) && errs[w] == nil; i += workers {
				errs[w] = writeAll(ctx, db, table, reqs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeAll sends one BatchWriteItem and its unprocessed items again, a
// bounded number of times.
func writeAll(ctx context.Context, db *dynamodb.Client, table string, reqs []types.WriteRequest) error {
	for range 10 {
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil {
			return fmt.Errorf("bench: seeding %s: %w", table, err)
		}
		if reqs = out.UnprocessedItems[table]; len(reqs) == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("bench: seeding %s: %d items still unprocessed after 10 rounds", table, len(reqs))
}
