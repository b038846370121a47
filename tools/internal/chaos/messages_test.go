package chaos

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Every re-encoding decodes to the same payment, and valuesDiffer says
// exactly whether the raw text of a payment field differs from the
// canonical body's.
func TestReencode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pays := newPayments(200, 0.1, rng)
	var differ, same, spaced, extra, escaped int
	for _, p := range pays {
		canonical := canonicalBody(p)
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(canonical), &want); err != nil {
			t.Fatalf("canonical %s: %v", canonical, err)
		}
		for range 5 {
			body, valuesDiffer := reencode(p, rng, time.Unix(1700000000, 0))
			var got payment
			if err := json.Unmarshal([]byte(body), &got); err != nil || got != p {
				t.Fatalf("reencode(%+v) = %s: decodes to %+v, %v; want the same payment", p, body, got, err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &raw); err != nil {
				t.Fatal(err)
			}
			rawDiffers := false
			for name, v := range want {
				if string(raw[name]) != string(v) {
					rawDiffers = true
				}
			}
			if rawDiffers != valuesDiffer {
				t.Errorf("reencode(%+v) = %s: valuesDiffer = %v; raw field text differs: %v", p, body, valuesDiffer, rawDiffers)
			}
			if valuesDiffer {
				differ++
			} else {
				same++
			}
			if strings.Contains(body, " ") || strings.Contains(body, "\n") {
				spaced++
			}
			if _, ok := raw["sent_at"]; ok {
				extra++
			}
			if strings.Contains(body, `\u`) {
				escaped++
			}
		}
	}
	if differ == 0 || same == 0 || spaced == 0 || extra == 0 || escaped == 0 {
		t.Errorf("variety: %d with other value text, %d with the same, %d spaced, %d with an extra field, %d escaped; want some of each",
			differ, same, spaced, extra, escaped)
	}
}

// The producer's encoder, encoding/json, escapes '&': another encoder's
// plain '&' is the same value in other text.
func TestCanonicalBodyEscapesAmpersand(t *testing.T) {
	p := payment{ID: "pay_1", OrderID: "ord_1&gift", CustomerID: "cus_1", Amount: 100, Currency: "EUR"}
	if got, want := canonicalBody(p), `{"payment_id":"pay_1","order_id":"ord_1\u0026gift","customer_id":"cus_1","amount":100,"currency":"EUR"}`; got != want {
		t.Errorf("canonicalBody = %s; want %s", got, want)
	}
}

func TestSQSRecord(t *testing.T) {
	m := &message{id: "id-1", body: `{"a":1}`, group: "cus_1", dedupID: "pay_1", receives: 2, seq: 5,
		sent: time.UnixMilli(1000), firstReceive: time.UnixMilli(2000)}
	r := sqsRecord(m)
	if r.MessageId != "id-1" || r.Body != m.body || r.EventSourceARN != queueARN || !strings.HasSuffix(r.EventSourceARN, ".fifo") {
		t.Errorf("record %+v; want the message on the FIFO queue", r)
	}
	for k, want := range map[string]string{"ApproximateReceiveCount": "2", "MessageGroupId": "cus_1", "MessageDeduplicationId": "pay_1",
		"SentTimestamp": "1000", "ApproximateFirstReceiveTimestamp": "2000"} {
		if got := r.Attributes[k]; got != want {
			t.Errorf("attribute %s = %q; want %q", k, got, want)
		}
	}
	if len(r.Attributes["SequenceNumber"]) != 20 {
		t.Errorf("SequenceNumber %q; want 20 digits", r.Attributes["SequenceNumber"])
	}
	if sum := md5.Sum([]byte(m.body)); r.Md5OfBody != hex.EncodeToString(sum[:]) {
		t.Errorf("Md5OfBody %q; want %x", r.Md5OfBody, sum)
	}
}
