package outbox_test

// Breaks found by a review told to break the relay and Publish: each test
// failed on 0d28f4f, and passes since the dead letter and Publish keep to
// SQS's and DynamoDB's limits.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// A poison item (its queue does not exist) whose body Publish accepted
// (200,000 bytes, half of what it allows) is made of characters that
// encoding/json escapes: '<' becomes \u003c, six bytes. Its dead letter
// (the image as JSON) is then over 1.2 MB, past SQS's 1 MiB (the largest
// MaximumMessageSize a queue can have), so the dead-letter queue refuses
// it, the record fails, and the shard stops at the item on every retry:
// the poison item holds up everything behind it, which
// RelayOptions.DeadLetterQueueURL promises it never does, and after
// MaximumRetryAttempts the good items after it in its batch are given up.
func TestBreakDeadLetterOfALargeEscapedBodyBlocksTheShard(t *testing.T) {
	var missing string
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		queue, body := f.queue, `{"payment_id":"`+p.ID+`"}`
		if p.ID == "pay_poison" {
			// An HTML receipt, say: SQS takes it as it is (200 KB).
			queue, body = missing, "<p>"+strings.Repeat("<", 200_000)+"</p>"
		}
		return ob.Publish(ctx, outbox.Message{QueueURL: queue, Name: "payment.charged", Body: body, GroupID: p.Customer})
	}})
	missing = f.queue[:strings.LastIndex(f.queue, "/")+1] + "gone-" + testenv.Name(t) + ".fifo"
	// The largest message a queue takes, so that only the dead letter's
	// own size is at stake.
	dlq := testenv.Queue(t, f.sqs, false, map[string]string{"MaximumMessageSize": "1048576"})
	f.deliver(pay("pay_poison", "cus_B", 1))
	f.deliver(pay("pay_c", "cus_C", 2))
	ev := f.stream()
	if inserts(ev) != 2 {
		t.Fatalf("stream holds %d inserts; want 2 (Publish took the poison item)", inserts(ev))
	}
	resp := relayOnce(t, f, ev, dlq)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("the relay failed %v (the poison item's sequence number %s): its dead letter was refused, and the shard waits on it; want it dead-lettered and pay_c sent",
			resp.BatchItemFailures, ev.Records[0].Change.SequenceNumber)
	}
	if got := f.downstream(); len(got) != 1 {
		t.Errorf("downstream holds %d messages; want pay_c's", len(got))
	}
	if dead := testenv.Drain(t, f.sqs, dlq); len(dead) != 1 {
		t.Errorf("dead-letter queue holds %d messages; want the poison item's", len(dead))
	}
}

// Eleven messages of 390,000 bytes each, each within Publish's item limit
// and the transaction's 100 writes: 4.3 MB in one TransactWriteItems,
// whose items DynamoDB caps at 4 MB in all ("The aggregate size of the
// items in the transaction cannot exceed 4 MB"). Publish promises to
// refuse what would make "a completion DynamoDB refuses after the work";
// it takes them, and the completion fails after the charge (moto does not
// enforce the 4 MB, so the test asks Publish).
func TestBreakPublishTakesMoreThanATransactionsFourMB(t *testing.T) {
	var publishErr error
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		var msgs []outbox.Message
		for i := range 11 {
			msgs = append(msgs, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: fmt.Sprintf("receipt.%d", i),
				Body: strings.Repeat("r", 390_000)})
		}
		publishErr = ob.Publish(ctx, msgs...)
		return publishErr
	}})
	f.deliver(pay("pay_big", "cus_A", 1))
	if !errors.Is(publishErr, outbox.ErrInvalidMessage) {
		t.Errorf("Publish of 11 × 390 KB messages (%.1f MB in one transaction, DynamoDB's limit 4 MB): %v; want outbox.ErrInvalidMessage",
			float64(11*390_000)/1e6, publishErr)
	}
}
