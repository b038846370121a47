package main

import (
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Found by review (fixed): two payments with one payment_id, for different
// customers, each followed by "customer_id":null. parsePayment (encoding/json
// into Payment) sees cus_A and cus_B, both valid; payload validation sees
// customer_id null in both, the same payload. The second payment is then
// reported done, answered with the first one's charge: cus_B is never
// charged and no mismatch is raised. It must fail as a reused key with a
// different payload (ErrPayloadMismatch), as it does without the nulls.
func TestReviewPaymentForAnotherCustomerIsNotTakenForADuplicate(t *testing.T) {
	f := setup(t, nil)
	first := lambdakittest.Message(`{"payment_id":"pay_n","order_id":"ord_1","customer_id":"cus_A","customer_id":null,"amount":100,"currency":"EUR"}`)
	second := lambdakittest.Message(`{"payment_id":"pay_n","order_id":"ord_1","customer_id":"cus_B","customer_id":null,"amount":100,"currency":"EUR"}`)
	for _, m := range []string{first.Body, second.Body} {
		p, _, err := parsePayment(m)
		if err != nil {
			t.Fatalf("premise: %s is refused: %v", m, err)
		}
		t.Logf("handler decodes customer %q", p.CustomerID)
	}
	// A field named twice is refused by payload validation, so the first
	// already fails, charging nothing; if it went through, the second must
	// fail as a mismatch. Either way cus_B is never answered with cus_A's
	// charge.
	if failed := f.run(t, first); len(failed) != 0 {
		if n := len(f.gw.Charges()); n != 0 {
			t.Fatalf("first payment failed after %d charges; want a refusal before any", n)
		}
	}
	failed := f.run(t, second)
	charges := f.gw.Charges()
	if !failed[second.MessageId] {
		t.Errorf("payment for cus_B reported done with %d gateway charge(s) %+v, the ledger row says customer %q; want it failed as a payload mismatch",
			len(charges), charges, attr(f.ledger(t, "pay_n"), "customer_id"))
	}
}
