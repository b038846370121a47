package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// With a dead-letter queue, an invalid payment goes there on its first
// delivery, as received, and succeeds; a valid payment that fails for a
// while does not, and comes back as usual.
func TestInvalidPaymentGoesToTheDeadLetterQueue(t *testing.T) {
	f := setup(t, nil)
	client := sqs.NewFromConfig(moto.Config(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dlq := testenv.Queue(t, client, true, nil)
	handler := mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.NewJSONHandler(f.logs, nil)), withDeadLetterQueue(client, dlq))

	invalidBody := `{"payment_id":"pay_dlq_1","order_id":"ord_1","customer_id":"cus_A","amount":100,"currency":"eur"}`
	invalid := lambdakittest.Message(invalidBody, lambdakittest.InGroup("cus_A"), lambdakittest.WithAttribute("source", "checkout"))
	later := lambdakittest.Message(body("pay_dlq_2", "cus_A", 100), lambdakittest.InGroup("cus_A"))
	flaky := lambdakittest.Message(body("pay_dlq_3", "cus_B", 100), lambdakittest.InGroup("cus_B"))
	f.gw.FailNext(1)
	// pay_dlq_2 runs after the invalid payment in its group; which of
	// pay_dlq_2 and pay_dlq_3 meets the failing gateway call depends on
	// the groups' timing, so the two go in separate batches.
	resp, _ := handler(ctx, lambdakittest.Event(flaky)) // ErrAllFailed
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("transient failure: failures %v; want the record to come back", resp.BatchItemFailures)
	}
	resp, err := handler(ctx, lambdakittest.Event(invalid, later))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("invalid then valid payment: error %v, failures %v; want both handled", err, resp.BatchItemFailures)
	}
	if c := f.gw.Charges(); len(c) != 1 || c[0].PaymentID != "pay_dlq_2" {
		t.Errorf("charges %+v; want pay_dlq_2 only", c)
	}

	got := testenv.Drain(t, client, dlq)
	if len(got) != 1 {
		t.Fatalf("the dead-letter queue holds %d messages; want the invalid payment only", len(got))
	}
	m := got[0]
	if aws.ToString(m.Body) != invalidBody || m.Attributes["MessageGroupId"] != "cus_A" || aws.ToString(m.MessageAttributes["source"].StringValue) != "checkout" {
		t.Errorf("dead letter: body %q, group %q, attributes %v; want the message as received", aws.ToString(m.Body), m.Attributes["MessageGroupId"], m.MessageAttributes)
	}
	if !strings.Contains(f.logs.String(), "currency must be three upper-case letters") {
		t.Errorf("logs do not give the reason:\n%s", f.logs.String())
	}
}

func TestConfigDeadLetterQueueURL(t *testing.T) {
	env := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example"}
	get := func(k string) string { return env[k] }
	if c, err := configFromEnv(get); err != nil || c.DeadLetterQueueURL != "" {
		t.Errorf("without DEAD_LETTER_QUEUE_URL: %+v, %v; want no dead-letter queue", c, err)
	}
	env["DEAD_LETTER_QUEUE_URL"] = "https://sqs.eu-west-1.amazonaws.com/123456789012/payments-dlq.fifo"
	if c, err := configFromEnv(get); err != nil || c.DeadLetterQueueURL != env["DEAD_LETTER_QUEUE_URL"] {
		t.Errorf("with DEAD_LETTER_QUEUE_URL: %+v, %v; want it read", c, err)
	}
	for _, bad := range []string{"PaymentDLQ", "https://sqs.eu-west-1.amazonaws.com/", "arn:aws:sqs:eu-west-1:123456789012:dlq"} {
		env["DEAD_LETTER_QUEUE_URL"] = bad
		if _, err := configFromEnv(get); err == nil || !strings.Contains(err.Error(), "DEAD_LETTER_QUEUE_URL") {
			t.Errorf("DEAD_LETTER_QUEUE_URL %q: %v; want an error naming it", bad, err)
		}
	}
}
