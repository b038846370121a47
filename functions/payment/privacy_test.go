package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A payment body whose every value is easy to find again: if any of them
// shows up where it has no reason to be, it was copied there.
func traceableBody(id, customer string) string {
	return fmt.Sprintf(`{"payment_id":%q,"order_id":"ord_TRACE_%s","customer_id":%q,"amount":4242,"currency":"EUR","note":"NOTE_TRACE_%s"}`,
		id, id, customer, id)
}

// The idempotency record lives on the ledger row, whose key and fields are
// the payment's; the record's own attributes copy nothing of the message:
// in progress (seen from the gateway, while the charge runs) the row has
// only the record's attributes, its key "payment#<payment_id>" and its
// validation a SHA-256; completed, it has the ledger's fields besides, its
// data is the Outcome alone, and no value of the record's attributes holds
// a field of the body, nor does any attribute hold the body or a field the
// ledger does not keep (the note).
func TestLedgerRecordCopiesNothingOfTheMessage(t *testing.T) {
	var (
		f          *fixture
		mu         sync.Mutex
		inProgress []map[string]types.AttributeValue
	)
	f = setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		items := f.records(t)
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
	completed := f.records(t)
	if len(inProgress) < 1 || len(completed) != 2 {
		t.Fatalf("got %d in-progress and %d completed records; want at least 1 and 2", len(inProgress), len(completed))
	}

	// Values the record's own attributes must not hold, and values no
	// attribute may hold.
	var fields, never []string
	for _, b := range []string{charged, declined} {
		var m map[string]any
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"payment_id", "order_id", "customer_id"} {
			fields = append(fields, m[k].(string))
		}
		never = append(never, b, m["note"].(string))
	}
	wantIDs := map[string]bool{ledgerKey("pay_TRACE_charged"): true, ledgerKey("pay_TRACE_declined"): true}
	recordAttrs := []string{"data", "expiration", "in_progress_expiration", "lease", "failure", recordStatusAttr, "validation"}

	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	check := func(t *testing.T, item map[string]types.AttributeValue, wantAttrs []string) {
		t.Helper()
		if got := slices.Sorted(maps.Keys(item)); !slices.Equal(got, wantAttrs) {
			t.Errorf("got attributes %v; want exactly %v", got, wantAttrs)
		}
		if id := attr(item, ledgerKeyAttr); !wantIDs[id] {
			t.Errorf("got %s %q; want %s", ledgerKeyAttr, id, ledgerKey("<payment_id>"))
		}
		if v := attr(item, "validation"); !hex64.MatchString(v) {
			t.Errorf("got validation %q; want 64 hex digits (a SHA-256)", v)
		}
		for name, v := range item {
			text := attrText(v)
			for _, s := range never {
				if strings.Contains(text, s) {
					t.Errorf("attribute %s = %q contains %q from the message", name, text, s)
				}
			}
			if !slices.Contains(recordAttrs, name) {
				continue
			}
			for _, s := range fields {
				if strings.Contains(text, s) {
					t.Errorf("record attribute %s = %q contains %q from the message", name, text, s)
				}
			}
		}
	}
	t.Run("in progress", func(t *testing.T) {
		for _, item := range inProgress {
			if attr(item, recordStatusAttr) != "INPROGRESS" {
				continue // the other payment's record, already completed
			}
			check(t, item, slices.Sorted(slices.Values([]string{"expiration", "in_progress_expiration", "lease", ledgerKeyAttr, recordStatusAttr, "validation"})))
		}
	})
	t.Run("completed", func(t *testing.T) {
		for _, item := range completed {
			ledger := []string{"status", "amount", "currency", "order_id", "customer_id", "recorded_at", "charge_id",
				"effect"} // the charge, as the handler declared it (lambdakit.EffectDone)
			if attr(item, "status") == StatusDeclined {
				ledger = append(ledger[:len(ledger)-2], "decline_reason") // no charge, no effect
			}
			// No expiration: a completed payment is kept forever.
			want := append([]string{"data", "in_progress_expiration", "lease", ledgerKeyAttr, recordStatusAttr, "validation"}, ledger...)
			check(t, item, slices.Sorted(slices.Values(want)))
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
