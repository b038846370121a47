package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The reasons the library itself gives for a failed record (decoding, key
// and payload errors, its own sentinels) never repeat the message body or
// the string values in it, so the batch's failure lines are safe to keep.
func TestFailureLinesNeverContainTheBody(t *testing.T) {
	type order struct {
		ID     string `json:"id"`
		Amount int    `json:"amount"`
		Items  []struct {
			SKU string `json:"sku"`
		} `json:"items"`
	}
	bodies := map[string]string{
		"not JSON":             `{"id":"ord_SECRET_1","card":"SECRET_PAN" oops}`,
		"wrong type":           `{"id":"ord_SECRET_2","amount":"SECRET_AMOUNT"}`,
		"wrong nested type":    `{"id":"ord_SECRET_3","amount":1,"items":[{"sku":["SECRET_SKU"]}]}`,
		"key missing":          `{"amount":5,"card":"SECRET_PAN_4"}`,
		"key an object":        `{"id":{"inner":"SECRET_KEY_5"},"amount":5}`,
		"key empty":            `{"id":"","card":"SECRET_PAN_6"}`,
		"key ambiguous":        `{"id":"ord_SECRET_7","ID":"ord_SECRET_7b"}`,
		"payload not JSON":     `"SECRET_STRING_8"`,
		"payload mismatch":     `{"id":"ord_SECRET_9","amount":2,"card":"SECRET_PAN_9b"}`,
		"handler error":        `{"id":"ord_SECRET_10","amount":-1}`,
		"handler panic":        `{"id":"ord_SECRET_11","amount":-2}`,
		"skipped in its group": `{"id":"ord_SECRET_12","amount":3}`,
	}
	var logs lambdakittest.LogBuffer
	store := &lambdakittest.MemoryStore{}
	handler := lambdakit.Typed(func(ctx context.Context, o order) error {
		switch {
		case o.Amount == -1:
			return errors.New("amount refused")
		case o.Amount == -2:
			panic("amount refused loudly")
		}
		return nil
	})
	idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Payload = lambdakit.PayloadFields("id", "amount")
		o.Logger = logs.Logger()
	})
	batch := lambdakit.Batch(idem(handler), func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger() })
	run := func(msgs ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		// One FIFO group: after a failure the rest is skipped.
		ms := lambdakittest.Event()
		for _, m := range msgs {
			ms.Records = append(ms.Records, lambdakittest.Message(m, lambdakittest.InGroup("g")))
		}
		_, _ = batch(ctx, ms)
	}
	run(`{"id":"ord_SECRET_9","amount":1}`) // completes, so that the mismatch has something to mismatch
	for name, b := range bodies {
		if name != "skipped in its group" {
			run(b)
		}
	}
	run(bodies["handler error"], bodies["skipped in its group"])

	failures := 0
	for _, l := range logs.Lines(t) {
		if l["msg"] == "message failed" {
			failures++
		}
	}
	if want := len(bodies) + 1; failures != want { // the handler error fails twice
		t.Errorf("got %d failure lines; want %d:\n%s", failures, want, logs.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "SECRET") {
			t.Errorf("log line repeats a value from a body: %s", line)
		}
		for name, b := range bodies {
			q, _ := json.Marshal(b)
			if strings.Contains(line, b) || strings.Contains(line, string(q[1:len(q)-1])) {
				t.Errorf("log line contains the %s body: %s", name, line)
			}
		}
	}
}
