package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A payment whose stored fields would make its ledger row larger than
// DynamoDB's 400 KB item limit must be refused by validation, before any
// lock or charge, as a permanent failure: with a dead-letter queue it goes
// there on its first delivery; without one it fails every delivery, never
// reaching the gateway. Were it charged first, the completing
// TransactWriteItems would fail with a ValidationException on every
// delivery, each delivery would call the gateway again, and the message
// would reach the DLQ with no ledger row and no idempotency record.
//
// DynamoDB counts an item as the UTF-8 bytes of its attribute names and
// string values: each case below makes the ledger row more than 409,600
// bytes (400 KiB), counted that way. The combined case has two fields that
// would each fit alone.
func TestPaymentTooLargeToStoreIsRefusedBeforeCharging(t *testing.T) {
	const over = 400<<10 + 1 // bytes: more than an item holds (400 KiB), the field alone
	payment := func(id, order, customer string) string {
		return fmt.Sprintf(`{"payment_id":%q,"order_id":%q,"customer_id":%q,"amount":100,"currency":"EUR"}`, id, order, customer)
	}
	cases := []struct {
		name, body, rule string
	}{
		{"order_id_400_KB", payment("pay_big_order", strings.Repeat("o", over), "cus_1"), "order_id must be"},
		{"customer_id_400_KB", payment("pay_big_customer", "ord_1", strings.Repeat("c", over)), "customer_id must be"},
		// 102,401 characters, 409,604 bytes: the limit is in bytes.
		{"order_id_400_KB_of_4-byte_characters", payment("pay_big_runes", strings.Repeat("𝄞", over/4+1), "cus_1"), "order_id must be"},
		{"order_id_and_customer_id_205_KB_each", payment("pay_big_both", strings.Repeat("o", over/2), strings.Repeat("c", over/2)), "order_id must be"},
		{"payment_id_400_KB", payment(strings.Repeat("p", over), "ord_1", "cus_1"), "payment_id must be"},
		{"currency_400_KB", strings.Replace(payment("pay_big_currency", "ord_1", "cus_1"), `"EUR"`, `"`+strings.Repeat("E", over)+`"`, 1), "currency must be"},
	}

	f := setup(t, nil)
	client := sqs.NewFromConfig(moto.Config(t))
	dlq := testenv.Queue(t, client, false, nil)
	withDLQ := mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.NewJSONHandler(f.logs, nil)), withDeadLetterQueue(client, dlq))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := lambdakittest.Message(c.body)
			before := f.gw.Requests()

			// Without a dead-letter queue: fails on every delivery,
			// with the rule, and never takes a lock or charges.
			for delivery := 1; delivery <= 3; delivery++ {
				f.logs.Reset()
				f.calls.Reset()
				if failed := f.run(t, msg); !failed[msg.MessageId] {
					t.Fatalf("delivery %d: got success; want the payment refused", delivery)
				}
				if n := f.gw.Requests() - before; n != 0 {
					t.Fatalf("delivery %d: the gateway got %d charge requests; want none (log: %.900s)", delivery, n, f.logs.String())
				}
				if reason := f.reasonFor(t, msg.MessageId); !strings.Contains(reason, "invalid payment: ") || !strings.Contains(reason, c.rule) {
					t.Errorf("delivery %d: got reason %.300q; want an invalid payment, %q", delivery, reason, c.rule)
				}
				if n := f.calls.Total(); n != 0 {
					t.Errorf("delivery %d: got DynamoDB calls %v; want none (refused before the lock)", delivery, f.calls.Counts())
				}
				msg = lambdakittest.Redelivery(msg)
			}

			// With one: a permanent failure, in the DLQ at once.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := withDLQ(ctx, lambdakittest.Event(lambdakittest.Message(c.body)))
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("with a DLQ: error %v, failures %v; want the payment dead-lettered", err, resp.BatchItemFailures)
			}
			if n := f.gw.Requests() - before; n != 0 {
				t.Fatalf("with a DLQ: the gateway got %d charge requests; want none", n)
			}
			if got := testenv.Drain(t, client, dlq); len(got) != 1 || aws.ToString(got[0].Body) != c.body {
				t.Errorf("the DLQ holds %d messages; want the payment, as received", len(got))
			}
			if n := f.idempotencyRecords(t); n != 0 {
				t.Errorf("got %d idempotency records; want none", n)
			}
		})
	}
}

// The largest valid payment is charged and stored: every field of the body
// at its limit (order_id in 4-byte characters, amount the largest int64),
// with the sandbox gateway and with gateways whose answer fills maxAnswer
// in the ways that make the stored fields largest. The ledger row, which is
// the payment's idempotency record, is locked by one PutItem and completed
// with its ledger fields and its result cached by one UpdateItem on moto;
// the row stays under half of DynamoDB's 400 KB; and a redelivery is
// answered from the record.
func TestLargestValidPaymentIsStored(t *testing.T) {
	id := "pay_max_" + strings.Repeat("9", maxPaymentID-len("pay_max_"))
	order := strings.Repeat("𝄞", maxOrderID/4)
	customer := "cus_max_" + strings.Repeat("c", maxCustomerID-len("cus_max_"))
	if len(id) != maxPaymentID || len(order) != maxOrderID || len(customer) != maxCustomerID {
		t.Fatalf("premise: fields of %d, %d, %d bytes; want the limits", len(id), len(order), len(customer))
	}
	largest := fmt.Sprintf(`{"payment_id":%q,"order_id":%q,"customer_id":%q,"amount":9223372036854775807,"currency":"EUR"}`, id, order, customer)

	cases := []struct {
		name   string
		status int    // the gateway's answer: 0 for the sandbox gateway, else this status and
		field  string // a JSON object of this field ("": no JSON at all)
		filler string // filled with this up to maxAnswer bytes, as sent and as decoded
		// decoded is one filler as the row stores it
		decoded, outcome, attr string
	}{
		{name: "sandbox_gateway", outcome: StatusCharged, attr: "charge_id"},
		// Each '<' is 6 bytes in the Outcome's JSON: the largest result.
		{"charge_id_of_<_filling_the_answer", http.StatusCreated, "charge_id", "<", "<", StatusCharged, "charge_id"},
		// Each invalid byte decodes to U+FFFD, 3 bytes: the largest row.
		{"charge_id_of_invalid_bytes_filling_the_answer", http.StatusCreated, "charge_id", "\xff", "\uFFFD", StatusCharged, "charge_id"},
		{"decline_reason_filling_the_answer", http.StatusPaymentRequired, "error", "é", "é", StatusDeclined, "decline_reason"},
		// Not JSON: the answer is the reason; the SDK sends each invalid
		// byte as U+FFFD.
		{"decline_answer_not_JSON_nor_UTF-8", http.StatusPaymentRequired, "", "a\xff", "a\uFFFD", StatusDeclined, "decline_reason"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var gw http.Handler // nil: the sandbox gateway
			want := "ch_000001"
			var custom atomic.Int64
			if c.status != 0 {
				prefix, suffix := "", ""
				if c.field != "" {
					prefix, suffix = `{"`+c.field+`":"`, `"}`
				}
				// As many fillers as fit maxAnswer, both as sent and as
				// decoded (an invalid byte decodes to 3).
				n := min((maxAnswer-len(prefix)-len(suffix))/len(c.filler), maxAnswer/len(c.decoded))
				answer := prefix + strings.Repeat(c.filler, n) + suffix
				want = strings.Repeat(c.decoded, n)
				gw = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					custom.Add(1)
					w.WriteHeader(c.status)
					fmt.Fprint(w, answer)
				})
			}
			f := setup(t, gw)
			requests := func() int {
				if gw == nil {
					return f.gw.Requests()
				}
				return int(custom.Load())
			}

			msg := lambdakittest.Message(largest)
			if failed := f.run(t, msg); len(failed) != 0 {
				t.Fatalf("got failure %.600q; want the payment stored", f.reasonFor(t, msg.MessageId))
			}
			if f.calls.Count("PutItem") != 1 || f.calls.Count("UpdateItem") != 1 || f.calls.Total() != 2 || requests() != 1 {
				t.Errorf("got DynamoDB calls %v, %d gateway requests; want one PutItem (the lock) and one UpdateItem (the completion with the ledger fields), one request", f.calls.Counts(), requests())
			}
			row := f.ledger(t, id)
			if attr(row, "status") != c.outcome || attr(row, "order_id") != order || attr(row, "customer_id") != customer ||
				attr(row, "amount") != "9223372036854775807" || attr(row, "currency") != "EUR" {
				t.Errorf("got ledger row with status %q, order_id of %d bytes, customer_id %q, amount %s; want %s and the payment as sent",
					attr(row, "status"), len(attr(row, "order_id")), attr(row, "customer_id"), attr(row, "amount"), c.outcome)
			}
			if got := attr(row, c.attr); got != want {
				t.Errorf("got %s of %d bytes (%.40q…); want %d bytes (%.40q…)", c.attr, len(got), got, len(want), want)
			}
			if attr(row, recordStatusAttr) != "COMPLETED" || attr(row, "data") == "" {
				t.Fatalf("got record status %q, data of %d bytes on the row; want COMPLETED, its result cached", attr(row, recordStatusAttr), len(attr(row, "data")))
			}
			if strings.Contains(f.logs.String(), "result not cached") {
				t.Errorf("the result was not cached:\n%.600s", f.logs.String())
			}
			// Well under the limit, so that a gateway's answer a little
			// longer than the tests' never makes a payment unstorable.
			if n := itemBytes(row); n > 200_000 {
				t.Errorf("the row is %d bytes; want at most 200,000, half of DynamoDB's 400 KB", n)
			}
			t.Logf("stored: ledger row with its record %d bytes (names and values, UTF-8)", itemBytes(row))

			if failed := f.run(t, lambdakittest.Redelivery(msg)); len(failed) != 0 {
				t.Fatalf("redelivery: got failure %.300q; want it answered from the record", f.reasonFor(t, msg.MessageId))
			}
			if n := requests(); n != 1 {
				t.Errorf("after a redelivery: %d gateway requests; want the first one only", n)
			}
		})
	}
}

// itemBytes is an item's size as DynamoDB counts strings: the UTF-8 bytes
// of each attribute's name and value (for a number, its digits, which
// overstate it).
func itemBytes(item map[string]types.AttributeValue) int {
	n := 0
	for name := range item {
		n += len(name) + len(attr(item, name))
	}
	return n
}
