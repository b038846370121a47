package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Bad payments, through the function's own wiring (validation, idempotency
// on DynamoDB, ledger) on moto. Each batch carries the bad payment beside a
// good one, which must be charged once; the bad one fails with the rule it
// breaks, before any lock or charge, or is charged where the sample's
// validation allows it.
func TestPaymentBadInput(t *testing.T) {
	valid := body("pay_bad", "cus_1", 100)
	with := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("%q is not in %s", old, valid)
		}
		return strings.Replace(valid, old, new, 1)
	}
	rejected := []struct {
		name, body, reason string
	}{
		{"body_not_JSON", `payment_id=pay_bad&amount=100`, "invalid payment: body is not a JSON payment object"},
		{"body_truncated", valid[:len(valid)-5], "invalid payment: body is not a JSON payment object"},
		{"payment_id_a_number", with(`"pay_bad"`, `4711`), "cannot unmarshal number into Go struct field Payment.payment_id of type string"},
		{"order_id_an_object", with(`"ord_1"`, `{"id":"ord_1"}`), "cannot unmarshal object into Go struct field Payment.order_id of type string"},
		{"amount_a_string", with(`100`, `"100"`), `amount must be a positive integer in minor units, got "100"`},
		{"amount_with_a_fraction", with(`100`, `12.5`), "amount must be a positive integer in minor units, got 12.5"},
		{"amount_with_an_exponent", with(`100`, `1e3`), "amount must be a positive integer in minor units, got 1e3"},
		{"amount_null", with(`100`, `null`), "amount must be a positive integer in minor units, got null"},
		{"amount_missing", with(`"amount":100,`, ``), "amount must be a positive integer in minor units, got nothing"},
		{"amount_zero", with(`100`, `0`), "amount must be a positive integer in minor units, got 0"},
		{"amount_negative", with(`100`, `-100`), "amount must be a positive integer in minor units, got -100"},
		{"amount_over_int64", with(`100`, `9223372036854775808`), "amount must be a positive integer in minor units, got 9223372036854775808"},
		{"amount_huge", with(`100`, strings.Repeat("9", 400)), "got " + strings.Repeat("9", 32) + "…"},
		{"amount_minus_zero", with(`100`, `-0`), "amount must be a positive integer in minor units, got -0"},
		{"amount_named_twice_the_last_a_string", with(`"amount":100`, `"amount":100,"amount":"100"`), `amount must be a positive integer in minor units, got "100"`},
		{"amount_named_twice_the_last_null", with(`"amount":100`, `"amount":100,"AMOUNT":null`), "amount must be a positive integer in minor units, got null"},
		{"payment_id_missing", with(`"payment_id":"pay_bad",`, ``), "payment_id must be 1-128 characters"},
		{"payment_id_too_long", with(`pay_bad`, strings.Repeat("p", 129)), "payment_id must be 1-128 characters"},
		{"payment_id_non-UTF-8", with(`pay_bad`, "pay_\xff"), "payment_id must be 1-128 characters"},
		{"order_id_missing", with(`"order_id":"ord_1",`, ``), "order_id must be a non-empty string"},
		{"customer_id_empty", with(`"cus_1"`, `""`), "customer_id must be a non-empty string"},
		// 65 characters, 257 bytes: the limits count bytes, as DynamoDB does.
		{"order_id_257_bytes", with(`"ord_1"`, `"x`+strings.Repeat("𝄞", 64)+`"`), "order_id must be a non-empty string of at most 256 bytes, got 257 bytes"},
		{"customer_id_129_bytes", with(`"cus_1"`, `"`+strings.Repeat("c", 129)+`"`), "customer_id must be a non-empty string of at most 128 bytes, got 129 bytes"},
		{"currency_missing", with(`,"currency":"EUR"`, ``), `currency must be three upper-case letters, got ""`},
		{"currency_a_number", with(`"EUR"`, `978`), "cannot unmarshal number into Go struct field Payment.currency of type string"},
		{"JSON_nested_10001_deep", with(`{`, `{"meta":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+`,`), "exceeded max depth"},
	}
	f := setup(t, nil)
	for _, c := range rejected {
		t.Run(c.name, func(t *testing.T) {
			bad := lambdakittest.Message(c.body)
			f.runBadAndGood(t, bad, c.name, func(t *testing.T, failed map[string]bool) {
				if !failed[bad.MessageId] {
					t.Fatal("got success; want the bad payment failed")
				}
				if reason := f.reasonFor(t, bad.MessageId); !strings.Contains(reason, c.reason) {
					t.Errorf("got reason %.300q; want it to say %q", reason, c.reason)
				}
				// Validation comes before the lock: the bad payment
				// takes none, and nothing is charged for it.
				if n := f.calls.Total(); n != 2 {
					t.Errorf("got %d DynamoDB calls; want only the good payment's 2", n)
				}
			})
		})
	}

	// Accepted: a valid payment, however unusual its body.
	accepted := []struct {
		name, body, paymentID string
		amount                int64
	}{
		{"amount_the_largest_int64", with(`100`, `9223372036854775807`), "pay_bad", 9223372036854775807},
		{"body_near_256_KiB", with(`{`, `{"note":"`+strings.Repeat("n", 256<<10-len(valid)-64)+`",`), "pay_bad", 100},
		{"body_near_1_MiB", with(`{`, `{"note":"`+strings.Repeat("n", 1<<20-len(valid)-64)+`",`), "pay_bad", 100},
		{"JSON_nested_10000_deep", with(`{`, `{"meta":`+strings.Repeat("[", 9999)+strings.Repeat("]", 9999)+`,`), "pay_bad", 100},
		{"unknown_fields", with(`{`, `{"note":{"a":[1,2,{"b":null}]},"extra":true,`), "pay_bad", 100},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, nil)
			msg := lambdakittest.Message(c.body)
			f.runBadAndGood(t, msg, c.name, func(t *testing.T, failed map[string]bool) {
				if failed[msg.MessageId] {
					t.Fatalf("got failure %.300q; want the payment charged", f.reasonFor(t, msg.MessageId))
				}
				row := f.ledger(t, c.paymentID)
				if attr(row, "status") != StatusCharged || attr(row, "amount") != fmt.Sprint(c.amount) {
					t.Errorf("got ledger row %v; want CHARGED, amount %d", row, c.amount)
				}
			})
		})
	}
}

// runBadAndGood runs bad and a good payment in one batch, hands the
// failures to check, then checks that the good payment was charged once
// and recorded, and that no idempotency record is left in progress.
func (f *fixture) runBadAndGood(t *testing.T, bad events.SQSMessage, name string, check func(*testing.T, map[string]bool)) {
	t.Helper()
	f.logs.Reset()
	f.calls.Reset()
	goodID := "pay_good_" + name
	good := lambdakittest.Message(body(goodID, "cus_1", 1))
	failed := f.run(t, bad, good)
	check(t, failed)
	if failed[good.MessageId] {
		t.Errorf("the good payment failed: %.300q", f.reasonFor(t, good.MessageId))
	}
	charges := 0
	for _, c := range f.gw.Charges() {
		if c.PaymentID == goodID {
			charges++
		}
	}
	if row := f.ledger(t, goodID); charges != 1 || attr(row, "status") != StatusCharged {
		t.Errorf("good payment: got %d charges, ledger row %v; want 1 and CHARGED", charges, row)
	}
	if n := f.inProgress(t); n != 0 {
		t.Errorf("got %d idempotency records in progress after the batch; want none", n)
	}
}

// reasonFor returns the reason of the one "message failed" line about id.
func (f *fixture) reasonFor(t *testing.T, id string) string {
	t.Helper()
	var reasons []string
	for _, l := range f.logs.Lines(t) {
		if l["msg"] == "message failed" && l["messageId"] == id {
			reasons = append(reasons, fmt.Sprint(l["reason"]))
		}
	}
	if len(reasons) != 1 {
		t.Fatalf("got %d failure lines for %s; want 1", len(reasons), id)
	}
	return reasons[0]
}

// inProgress scans the payments table for records left in progress.
func (f *fixture) inProgress(t *testing.T) int {
	t.Helper()
	n := 0
	for _, item := range f.records(t) {
		if attr(item, recordStatusAttr) != "COMPLETED" {
			n++
		}
	}
	return n
}
