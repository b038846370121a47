package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A payment body whose every value is easy to find again: if any of them
// shows up in the idempotency table or the logs, it was copied there.
func traceableBody(id, customer string) string {
	return fmt.Sprintf(`{"payment_id":%q,"order_id":"ord_TRACE_%s","customer_id":%q,"amount":4242,"currency":"EUR","note":"NOTE_TRACE_%s"}`,
		id, id, customer, id)
}

func (f *fixture) scanIdempotency(tb testing.TB) []map[string]types.AttributeValue {
	tb.Helper()
	out, err := f.db.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(f.cfg.IdempotencyTable), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out.Items
}

// The idempotency table keeps hashes, never the key or the payload: the
// record of a payment, in progress (seen from the gateway, while the charge
// runs) and completed, has only the schema's attributes, its id is the
// prefix and the SHA-256 of the payment_id, its validation is a SHA-256,
// and no value holds the payment_id, any other field of the body, or the
// body.
func TestIdempotencyTableHoldsNoRawKeysOrPayloads(t *testing.T) {
	var (
		f          *fixture
		mu         sync.Mutex
		inProgress []map[string]types.AttributeValue
	)
	f = setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		items := f.scanIdempotency(t)
		mu.Lock()
		inProgress = append(inProgress, items...)
		mu.Unlock()
		f.gw.ServeHTTP(w, r)
	}))
	charged := traceableBody("pay_TRACE_charged", "cus_TRACE_1")
	declined := traceableBody("pay_TRACE_declined", gateway.DeclinedCustomerPrefix+"_TRACE")
	if failed := f.run(t, lambdakittest.Message(charged), lambdakittest.Message(declined)); len(failed) != 0 {
		t.Fatalf("got failures %v; want both payments processed", failed)
	}
	completed := f.scanIdempotency(t)
	if len(inProgress) < 1 || len(completed) != 2 {
		t.Fatalf("got %d in-progress and %d completed records; want at least 1 and 2", len(inProgress), len(completed))
	}

	secrets := []string{charged, declined}
	for _, b := range secrets[:2] {
		var m map[string]any
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"payment_id", "order_id", "customer_id", "note"} {
			secrets = append(secrets, m[k].(string))
		}
	}
	wantIDs := map[string]bool{}
	for _, id := range []string{"pay_TRACE_charged", "pay_TRACE_declined"} {
		sum := sha256.Sum256([]byte(id))
		wantIDs[idempotencyPrefix+"#"+hex.EncodeToString(sum[:])] = true
	}

	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	check := func(t *testing.T, item map[string]types.AttributeValue, wantAttrs []string) {
		t.Helper()
		if got := slices.Sorted(maps.Keys(item)); !slices.Equal(got, wantAttrs) {
			t.Errorf("got attributes %v; want exactly %v", got, wantAttrs)
		}
		if id := attr(item, "id"); !wantIDs[id] {
			t.Errorf("got id %q; want %s#<sha256 hex of the payment_id>", id, idempotencyPrefix)
		}
		if v := attr(item, "validation"); !hex64.MatchString(v) {
			t.Errorf("got validation %q; want 64 hex digits (a SHA-256)", v)
		}
		for name, v := range item {
			text := attrText(v)
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("attribute %s = %q contains %q from the message", name, text, s)
				}
			}
		}
	}
	t.Run("in progress", func(t *testing.T) {
		for _, item := range inProgress {
			if attr(item, "status") != "INPROGRESS" {
				continue // the other payment's record, already completed
			}
			check(t, item, []string{"expiration", "id", "in_progress_expiration", "lease", "status", "validation"})
		}
	})
	t.Run("completed", func(t *testing.T) {
		for _, item := range completed {
			check(t, item, []string{"data", "expiration", "id", "in_progress_expiration", "lease", "status", "validation"})
			// The cached result is the outcome, nothing of the request.
			var outcome map[string]any
			if err := json.Unmarshal([]byte(attr(item, "data")), &outcome); err != nil {
				t.Fatalf("data %q: %v", attr(item, "data"), err)
			}
			for k := range outcome {
				if k != "status" && k != "charge_id" && k != "reason" {
					t.Errorf("data has %q; want only status, charge_id and reason", k)
				}
			}
		}
	})
}

// attrText is an attribute's value as text, whatever its type.
func attrText(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return string(v.Value)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// Records fail for every reason the sample has, and no log line holds a
// message body, nor a value of a field that no reason repeats; what a
// validation error repeats of a field is clipped.
func TestLogsNeverContainMessageBodies(t *testing.T) {
	var f *fixture
	f = setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "payment-pay_TRACE_rejected" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"currency not supported"}`)
			return
		}
		f.gw.ServeHTTP(w, r)
	}))
	long := strings.Repeat("X", 40) + "TAIL_TRACE"
	valid := traceableBody("pay_TRACE_ok", "cus_TRACE_ok")
	bodies := map[string]string{
		"charged":           valid,
		"duplicate":         valid,
		"payload mismatch":  strings.Replace(valid, "4242", "4343", 1),
		"declined":          traceableBody("pay_TRACE_declined", gateway.DeclinedCustomerPrefix+"_TRACE"),
		"gateway rejection": traceableBody("pay_TRACE_rejected", "cus_TRACE_rejected"),
		"gateway down":      traceableBody("pay_TRACE_down", "cus_TRACE_down"),
		"not JSON":          `{"payment_id":"pay_TRACE_broken","order_id":"ord_TRACE_broken" NOTE_TRACE_broken`,
		"amount an object":  strings.Replace(traceableBody("pay_TRACE_obj", "cus_TRACE_obj"), "4242", `{"pan":"`+long+`"}`, 1),
		"currency too long": strings.Replace(traceableBody("pay_TRACE_cur", "cus_TRACE_cur"), `"EUR"`, `"`+long+`"`, 1),
		"bad payment_id":    strings.Replace(traceableBody("pay_TRACE_bad", "cus_TRACE_bad"), `"pay_TRACE_bad"`, `"pay #`+long+`"`, 1),
		"no order":          strings.Replace(traceableBody("pay_TRACE_noorder", "cus_TRACE_noorder"), `"ord_TRACE_pay_TRACE_noorder"`, `""`, 1),
	}
	// One at a time, in this order, so that the duplicate and the
	// mismatch find the charged payment completed.
	order := []string{"charged", "duplicate", "payload mismatch", "declined", "gateway rejection", "gateway down",
		"not JSON", "amount an object", "currency too long", "bad payment_id", "no order"}
	for _, name := range order {
		if name == "gateway down" {
			f.gw.FailNext(1)
		}
		f.run(t, lambdakittest.Message(bodies[name]))
	}
	// And a FIFO group whose later record is skipped after a failure.
	f.run(t, lambdakittest.Message(bodies["not JSON"], lambdakittest.InGroup("cus_TRACE_fifo")),
		lambdakittest.Message(traceableBody("pay_TRACE_skipped", "cus_TRACE_skipped"), lambdakittest.InGroup("cus_TRACE_fifo")))

	lines := f.logs.Lines(t)
	failures := 0
	for _, l := range lines {
		if l["msg"] == "message failed" {
			failures++
		}
	}
	// mismatch, rejection, down, not JSON, object, currency, id, order; then not JSON and the skipped one.
	if failures != 10 {
		t.Errorf("got %d failure lines; want 10 (every failing record logged): %s", failures, f.logs.String())
	}
	// Field values that no log line has any reason to repeat.
	never := []string{"TAIL_TRACE", "NOTE_TRACE", "ord_TRACE", "cus_TRACE_ok", "cus_TRACE_rejected", "cus_TRACE_down", "cus_TRACE_obj", "cus_TRACE_skipped"}
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		for name, b := range bodies {
			if strings.Contains(line, b) || strings.Contains(line, jsonQuoted(b)) {
				t.Errorf("log line %s contains the %s body", line, name)
			}
		}
		for _, s := range never {
			if strings.Contains(line, s) {
				t.Errorf("log line %s contains %q from a message", line, s)
			}
		}
	}
}

// jsonQuoted is s as it appears inside a JSON log line's string.
func jsonQuoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
