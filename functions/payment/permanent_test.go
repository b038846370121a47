package main

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// sentLetters is a dead-letter sender that keeps the IDs of the messages
// it was given.
type sentLetters struct {
	mu  sync.Mutex
	ids []string
}

func (s *sentLetters) SendDeadLetter(_ context.Context, msg *events.SQSMessage, _ error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, msg.MessageId)
	return nil
}

// What the function sends to the dead-letter queue on the first delivery:
// an invalid payment, a payment_id that cannot be read safely, and a
// payment_id reused for another payment; a gateway that fails for now is
// retried instead.
func TestWhatGoesToTheDeadLetterQueue(t *testing.T) {
	f := setup(t, nil)
	if failed := f.run(t, lambdakittest.Message(body("pay_p1", "cus_A", 100))); len(failed) != 0 {
		t.Fatal(failed)
	}
	dlq := &sentLetters{}
	f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, lambdakittest.Logger(t),
		func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })

	invalid := lambdakittest.Message(`{"payment_id":"pay_p2","order_id":"ord_1","customer_id":"cus_B","amount":-5,"currency":"EUR"}`)
	ambiguous := lambdakittest.Message(`{"payment_id":"pay_p3","order_id":"ord_1","customer_id":"cus_C","amount":100,"currency":"EUR","PAYMENT_ID":"pay_p4"}`)
	reused := lambdakittest.Message(body("pay_p1", "cus_A", 999))
	for _, m := range []events.SQSMessage{invalid, ambiguous, reused} {
		if failed := f.run(t, m); len(failed) != 0 {
			t.Errorf("message %s: failed %v; want it sent to the dead-letter queue", m.Body, failed)
		}
	}
	f.gw.FailNext(1)
	flaky := lambdakittest.Message(body("pay_p5", "cus_D", 100))
	if failed := f.run(t, flaky); !failed[flaky.MessageId] {
		t.Errorf("a gateway failure: got success; want the message to come back")
	}
	dlq.mu.Lock()
	defer dlq.mu.Unlock()
	if want := []string{invalid.MessageId, ambiguous.MessageId, reused.MessageId}; !slices.Equal(dlq.ids, want) {
		t.Errorf("dead letters %q; want %q", dlq.ids, want)
	}
	if c := f.gw.Charges(); len(c) != 1 {
		t.Errorf("charges %+v; want pay_p1 only", c)
	}
}
