package lambdakit_test

// Tests from the third adversarial review of the idempotency path (after
// the read ahead, the dead-letter path and the per-record notes). The ones
// marked "Found by review 2" fail on the code they were written against;
// the others are regression tests of attacks that did not get through.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Found by review 2: the read ahead runs the middleware's KeyFunc on every
// record of the batch, including records the function routes elsewhere
// and that never reach this Idempotent. A KeyFunc written for the records
// that do reach it may panic on the others; that panic then happens in the
// goroutine of whichever record made the read ahead, and fails that
// record, a good one, instead of nobody (the other record never calls the
// KeyFunc). Batch promises that a panic fails only its record. On a FIFO
// queue the failed record also stops its group, so the pair comes back
// together, again and again, until maxReceiveCount moves the good
// payment to the dead-letter queue, never charged.
func TestReview2ReadAheadPanicOfAnotherRecordsKeyFailsAGoodRecord(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// Payments carry "payment": {"id": ...}; refunds are routed to a
	// handler of their own and have no "payment" object at all.
	paymentKey := func(msg *events.SQSMessage) (string, error) {
		var body struct {
			Payment *struct {
				ID string `json:"id"`
			} `json:"payment"`
		}
		if err := json.Unmarshal([]byte(msg.Body), &body); err != nil {
			return "", errors.Join(lambdakit.ErrInvalidKey, err)
		}
		return body.Payment.ID, nil // only payments get here: no nil check
	}
	fx := &effects{}
	charge := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		fx.add(msg.Body)
		return []byte(`"charged"`), nil
	})
	payments := lambdakit.Idempotent(store, paymentKey, quiet)(charge)
	refunds := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, nil
	})
	router := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if strings.Contains(msg.Body, `"refund"`) {
			return refunds.Handle(ctx, msg)
		}
		return payments.Handle(ctx, msg)
	})

	// Both come back after an earlier failed batch: receive count 2.
	pay := lambdakittest.Redelivery(lambdakittest.Message(`{"payment":{"id":"pay-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	refund := lambdakittest.Redelivery(lambdakittest.Message(`{"refund":{"id":"ref-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	b, logs := newBatch(router)
	resp, err := b(batchCtx(t), lambdakittest.Event(pay, refund))
	if err != nil {
		t.Errorf("got batch error %v; want none", err)
	}
	wantFailed(t, resp)
	if n := fx.count(pay.Body); n != 1 {
		t.Errorf("payment charged %d times; want 1", n)
	}
	for id, line := range logs.byMessageID(t) {
		t.Logf("message %s failed: %v", id, line["reason"])
	}
}
