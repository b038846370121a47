package lambdakit_test

// Tests from the second adversarial review of the idempotency path. The
// ones marked "Found by review" failed on the code they were written
// against, and pass since their fix; the others are regression tests of
// attacks that did not get through.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// reviewPayment is what a typed handler decodes, with a nested object so
// that encoding/json's merging of repeated objects into a struct shows.
type reviewPayment struct {
	PaymentID string `json:"payment_id"`
	Amount    int    `json:"amount"`
	Currency  string `json:"currency"`
	Card      struct {
		Number string `json:"number"`
	} `json:"card"`
}

// Found by review, fixed: payload validation treats two bodies as one payload when
// encoding/json decodes them into different payments. The canonical form
// keeps only the last of members with one name ("as in encoding/json"), but
// encoding/json into a struct does not replace an earlier value with a
// later one in two cases: a later null leaves a string, number or struct
// field as it was, and a later object is merged into the struct the earlier
// one filled. So {"currency":"USD","currency":null} is a USD payment and
// {"currency":"EUR","currency":null} a EUR one, yet they hash the same and
// the second replays the first's result: a EUR payment answered with a USD
// charge, and never charged.
func TestReviewPayloadDuplicateMembersThatStructsDecodeDifferently(t *testing.T) {
	pairs := []struct {
		name, first, second string
	}{
		{
			"later null keeps the earlier string",
			`{"payment_id":"p1","amount":100,"currency":"USD","currency":null}`,
			`{"payment_id":"p1","amount":100,"currency":"EUR","currency":null}`,
		},
		{
			"later null keeps the earlier number",
			`{"payment_id":"p1","amount":100,"amount":null,"currency":"USD"}`,
			`{"payment_id":"p1","amount":999,"amount":null,"currency":"USD"}`,
		},
		{
			"later object is merged into the earlier one",
			`{"payment_id":"p1","amount":100,"currency":"USD","card":{"number":"4111"},"card":{}}`,
			`{"payment_id":"p1","amount":100,"currency":"USD","card":{"number":"5500"},"card":{}}`,
		},
	}
	payloads := map[string]func(*lambdakit.IdempotencyOptions){
		"PayloadBody": func(*lambdakit.IdempotencyOptions) {},
		"PayloadFields": func(o *lambdakit.IdempotencyOptions) {
			o.Payload = lambdakit.PayloadFields("payment_id", "amount", "currency", "card.number")
		},
	}
	for _, p := range pairs {
		for pname, opt := range payloads {
			t.Run(pname+"/"+p.name, func(t *testing.T) {
				// The premise: encoding/json decodes the two bodies
				// into different payments.
				var a, b reviewPayment
				if json.Unmarshal([]byte(p.first), &a) != nil || json.Unmarshal([]byte(p.second), &b) != nil || a == b {
					t.Fatalf("premise: bodies decode to %+v and %+v; want two different payments", a, b)
				}
				var charged []reviewPayment
				h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.TypedResult(func(_ context.Context, v reviewPayment) (reviewPayment, error) {
					charged = append(charged, v)
					return v, nil
				}), opt)
				if _, err := handle(t, h, lambdakittest.Message(p.first)); err != nil {
					// PayloadFields refuses a field named twice: the
					// record fails, and nothing is taken for a
					// duplicate. That is safe too.
					if pname == "PayloadFields" && len(charged) == 0 {
						return
					}
					t.Fatalf("first payment: %v", err)
				}
				got, err := handle(t, h, lambdakittest.Message(p.second))
				if err == nil && len(charged) == 1 {
					t.Fatalf("second payment %+v was answered with the first one's result %s without running; want ErrPayloadMismatch", b, got)
				}
				if !errors.Is(err, lambdakit.ErrPayloadMismatch) {
					t.Errorf("second payment: got err %v; want ErrPayloadMismatch", err)
				}
			})
		}
	}
}

// Found by review, fixed: a body whose key field is set and then set again to null (or
// whose parent object is repeated without it) reads as having no key
// (ErrNoKey), so ProcessWithoutKey runs it without idempotency. But a
// handler decoding it with encoding/json sees the key: null leaves the
// earlier string in place, and a repeated object is merged. Every
// delivery of such a message charges the payment again. Fix 2 of the first
// review said only a message that truly has no key may run without a lock.
func TestReviewProcessWithoutKeyRunsMessagesWhoseKeyAStructSees(t *testing.T) {
	bodies := map[string]struct {
		path, body string
	}{
		"key set then null":          {"payment_id", `{"payment_id":"p1","amount":100,"payment_id":null}`},
		"parent repeated without it": {"card.number", `{"card":{"number":"4111"},"amount":100,"card":{}}`},
		"parent repeated as null":    {"card.number", `{"card":{"number":"4111"},"amount":100,"card":null}`},
	}
	for name, c := range bodies {
		t.Run(name, func(t *testing.T) {
			var v reviewPayment
			if err := json.Unmarshal([]byte(c.body), &v); err != nil || v.PaymentID == "" && v.Card.Number == "" {
				t.Fatalf("premise: %s decodes to %+v (err %v); want the key present", c.body, v, err)
			}
			ran := 0
			h := lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField(c.path), quiet,
				func(o *lambdakit.IdempotencyOptions) { o.ProcessWithoutKey = true })(
				lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
					ran++
					return nil, nil
				}))
			msg := lambdakittest.Message(c.body)
			for range 2 {
				_, _ = handle(t, h, lambdakittest.Redelivery(msg))
			}
			if ran > 1 {
				t.Errorf("the same message ran %d times without a lock, though a struct decodes its key; want at most once (or ErrInvalidKey)", ran)
			}
		})
	}
}

// Found by review, fixed (low severity): TTL is documented as "how long a completed record
// is remembered", but the expiration is computed when the lock is taken and
// Complete keeps it, so a record is remembered TTL minus the handler's run
// time. Here a handler runs 14 of Lambda's 15 minutes under a 20-minute TTL;
// a duplicate 10 minutes after the completion, well within the TTL, runs
// the handler again. (Powertools computes the expiry when it saves the
// result.)
func TestReviewTTLCountsFromCompletion(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	start := time.Now()
	var mu sync.Mutex
	now := start
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	ran := 0
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet, func(o *lambdakit.IdempotencyOptions) {
		o.TTL = 20 * time.Minute
		o.Now = clock
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		ran++
		advance(14 * time.Minute) // a long run, as the clock sees it
		return []byte(`"ch_1"`), nil
	}))
	// Lambda's longest invocation; the test itself takes no real time.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(15*time.Minute))
	defer cancel()
	msg := lambdakittest.Message(paymentBody("p-ttl-complete", 1))
	if _, err := h.Handle(ctx, &msg); err != nil {
		t.Fatal(err)
	}
	advance(10 * time.Minute) // 10 minutes after the completion
	again := lambdakittest.Redelivery(msg)
	if _, err := h.Handle(ctx, &again); err != nil {
		t.Fatal(err)
	}
	if ran != 1 {
		t.Errorf("handler ran %d times; want 1: a duplicate 10 min after completion, with a 20 min TTL, must be skipped", ran)
	}
}
