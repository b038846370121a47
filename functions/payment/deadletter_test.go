package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/valkeystore"
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

// A payment that fails after its charge is never charged again: its record
// keeps the failure and the charge, its message goes to the dead-letter
// queue with the reason to reconcile, and the metrics line counts it. Each
// failure here is one no check before the charge can catch: a completion
// DynamoDB refuses for good (the outbox table misconfigured, its partition
// key a number), and the handler's own error (the ledger row refused,
// with the records on Valkey: its table does not exist).
func TestPaymentFailedAfterItsChargeIsNeverChargedAgain(t *testing.T) {
	for name, run := range map[string]func(t *testing.T, f *fixture, opts ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, lambdakit.BatchGetter, string){
		"completion refused": func(t *testing.T, f *fixture, opts ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, lambdakit.BatchGetter, string) {
			f.cfg.EventsQueueURL = testenv.Queue(t, sqs.NewFromConfig(moto.Config(t)), true, nil)
			f.cfg.OutboxTable = testenv.Name(t) + "-outbox"
			// The outbox's keys, pk and id, but pk a number where the
			// outbox writes a string: DynamoDB refuses every write of it
			// (ValidationException).
			testenv.CreateTable(t, f.db, &dynamodb.CreateTableInput{
				TableName:   aws.String(f.cfg.OutboxTable),
				BillingMode: types.BillingModePayPerRequest,
				KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String("id"), KeyType: types.KeyTypeRange}},
				AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeN},
					{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
			})
			records, err := dynamostore.New(f.db, f.cfg.PaymentsTable, recordOnLedger)
			if err != nil {
				t.Fatal(err)
			}
			return mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, f.logs.Logger(), opts...), records, ledgerKey("pay_after_1")
		},
		"ledger row refused": func(t *testing.T, f *fixture, opts ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, lambdakit.BatchGetter, string) {
			c := f.cfg
			c.ValkeyAddrs = []string{redisserver.ForTest(t).Addr}
			c.PaymentsTable = testenv.Name(t) + "-no-such-table"
			vk, err := newValkey(t.Context(), c, aws.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(vk.Close)
			h, err := newHandler(c, f.db, vk, &http.Client{Timeout: 2 * time.Second}, f.logs.Logger(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			records, err := valkeystore.New(vk)
			if err != nil {
				t.Fatal(err)
			}
			return h, records, lambdakit.RecordID(idempotencyPrefix, "pay_after_1")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := setup(t, nil)
			client := sqs.NewFromConfig(moto.Config(t))
			dlq := testenv.Queue(t, client, true, nil)
			var metrics bytes.Buffer
			handler, records, id := run(t, f, withDeadLetterQueue(client, dlq), func(o *lambdakit.BatchOptions) { o.MetricsWriter = &metrics })

			msg := lambdakittest.Message(body("pay_after_1", "cus_A", 700), lambdakittest.InGroup("cus_A"))
			for i, m := range []events.SQSMessage{msg, lambdakittest.Redelivery(msg)} {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				resp, err := handler(ctx, lambdakittest.Event(m))
				cancel()
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Fatalf("delivery %d: error %v, failures %v; want the message handled (dead-lettered)", i+1, err, resp.BatchItemFailures)
				}
			}

			if c := f.gw.Charges(); len(c) != 1 || f.gw.Requests() != 1 {
				t.Errorf("charges %+v after %d gateway requests; want pay_after_1 charged once, one request", c, f.gw.Requests())
			}
			got, err := records.GetRecords(t.Context(), []string{id})
			if err != nil {
				t.Fatal(err)
			}
			if rec := got[id]; rec.Status != lambdakit.StatusCompleted || !strings.HasPrefix(rec.Effect, "charge ch_") ||
				!strings.Contains(rec.Failure, "failed after its effect: reconcile") || rec.Data != nil {
				t.Errorf("record %+v; want completed with the failure and the charge as its effect, no result", rec)
			}
			dead := testenv.Drain(t, client, dlq)
			if len(dead) != 1 || aws.ToString(dead[0].Body) != msg.Body {
				t.Errorf("the dead-letter queue holds %d messages; want the payment's, once", len(dead))
			}
			lines := 0
			for _, line := range f.logs.Lines(t) {
				if line["messageId"] == msg.MessageId && line["outcome"] == "dead-lettered" {
					lines++
					if line["reasonCode"] != "AfterEffect" || !strings.Contains(line["reason"].(string), "failed after its effect: reconcile") {
						t.Errorf("log line %v; want reasonCode AfterEffect and the reason to reconcile", line)
					}
				}
			}
			if lines != 2 {
				t.Errorf("%d dead-lettered lines for the payment; want one per delivery", lines)
			}
			counted := 0
			for _, l := range bytes.Split(bytes.TrimSpace(metrics.Bytes()), []byte("\n")) {
				var m map[string]any
				if err := json.Unmarshal(l, &m); err != nil {
					t.Fatalf("metrics line %q: %v", l, err)
				}
				n, _ := m["FailedAfterEffect"].(float64)
				counted += int(n)
			}
			if counted != 2 {
				t.Errorf("FailedAfterEffect counted %d; want 2 (each delivery)", counted)
			}
			if f.cfg.EventsQueueURL != "" {
				if n := len(testenv.Drain(t, client, f.cfg.EventsQueueURL)); n != 0 {
					t.Errorf("the events queue holds %d messages; want none (the event was dropped with the completion)", n)
				}
			}
		})
	}
}
