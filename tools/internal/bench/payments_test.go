package bench_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

func paymentID(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	return p.PaymentID
}

func TestPaymentsAreNewEachTime(t *testing.T) {
	a, b := bench.NewPayments("A"), bench.NewPayments("B")
	seen := map[string]bool{}
	for _, m := range slices.Concat(a.Take(5), a.Take(5), b.Take(5)) {
		id := paymentID(t, m.Body)
		if seen[id] {
			t.Fatalf("payment %s handed out twice", id)
		}
		seen[id] = true
	}
	if x, y := a.Take(1)[0].Body, b.Take(1)[0].Body; len(x) != len(y) {
		t.Fatalf("bodies of two prefixes differ in length: %q, %q", x, y)
	}
}

func TestBatches(t *testing.T) {
	msgs := bench.NewPayments("A").Take(25)
	batches := bench.InBatches(msgs, 10)
	if got := []int{len(batches[0]), len(batches[1]), len(batches[2])}; len(batches) != 3 || !slices.Equal(got, []int{10, 10, 5}) {
		t.Fatalf("InBatches(25, 10) gave %d batches; want 10, 10, 5", len(batches))
	}

	t.Run("redelivered keeps message IDs and bodies and counts the receive", func(t *testing.T) {
		again := bench.Redelivered(batches)
		for i := range batches {
			for j := range batches[i] {
				a, b := batches[i][j], again[i][j]
				if a.MessageId != b.MessageId || a.Body != b.Body || b.Attributes["ApproximateReceiveCount"] != "2" || a.ReceiptHandle == b.ReceiptHandle {
					t.Fatalf("redelivery of %s: got ID %s, receive count %s, same receipt handle %v",
						a.MessageId, b.MessageId, b.Attributes["ApproximateReceiveCount"], a.ReceiptHandle == b.ReceiptHandle)
				}
			}
		}
	})

	t.Run("mixed batches are half new, half redelivered", func(t *testing.T) {
		fresh := bench.NewPayments("N").Take(15)
		mixed := bench.Mixed(fresh, msgs, 10)
		if len(mixed) != 3 {
			t.Fatalf("Mixed(15 new, 25 old, 10) gave %d batches; want 3", len(mixed))
		}
		for _, b := range mixed {
			redelivered := 0
			for _, m := range b {
				if m.Attributes["ApproximateReceiveCount"] == "2" {
					redelivered++
				}
			}
			if len(b) != 10 || redelivered != 5 {
				t.Fatalf("a mixed batch has %d records, %d redelivered; want 10 and 5", len(b), redelivered)
			}
		}
	})
}

func TestPaddedPaymentsHaveTheSizeAsked(t *testing.T) {
	p := bench.NewPayments("P").Padded(1024)
	for _, m := range p.Take(3) {
		if len(m.Body) != 1024 {
			t.Fatalf("padded body is %d bytes; want 1024", len(m.Body))
		}
		var fields map[string]any
		if err := json.Unmarshal([]byte(m.Body), &fields); err != nil {
			t.Fatalf("padded body is not JSON: %v", err)
		}
		if fields["payment_id"] == "" || fields["currency"] != "EUR" || fields["amount"] == nil {
			t.Fatalf("padded body lost the payment's fields: %s", m.Body[:120])
		}
	}
	if short := bench.NewPayments("P").Padded(10).Take(1)[0].Body; len(short) < 100 {
		t.Fatalf("a size below the payment's cut the body to %d bytes", len(short))
	}
}
