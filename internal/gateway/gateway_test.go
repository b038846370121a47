package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/gateway"
)

func post(tb testing.TB, g *gateway.Gateway, key, body string) (int, map[string]any, http.Header) {
	tb.Helper()
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		tb.Fatalf("answer %q is not JSON: %v", w.Body.String(), err)
	}
	return w.Code, m, w.Header()
}

const charge = `{"payment_id":"p1","order_id":"o1","customer_id":"c1","amount":100,"currency":"EUR"}`

func TestGatewayIdempotencyKey(t *testing.T) {
	g := &gateway.Gateway{}
	code, first, _ := post(t, g, "k1", charge)
	if code != http.StatusCreated || first["charge_id"] == "" {
		t.Fatalf("got %d %v; want 201 with a charge_id", code, first)
	}
	code, again, h := post(t, g, "k1", charge)
	if code != http.StatusCreated || again["charge_id"] != first["charge_id"] || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: got %d %v; want the stored answer replayed", code, again)
	}
	if code, _, _ := post(t, g, "k1", strings.Replace(charge, "100", "200", 1)); code != http.StatusBadRequest {
		t.Errorf("same key, other body: got %d; want 400", code)
	}
	if code, _, _ := post(t, g, "", charge); code != http.StatusBadRequest {
		t.Errorf("no key: got %d; want 400", code)
	}
	if n := len(g.Charges()); n != 1 {
		t.Errorf("got %d charges; want 1", n)
	}
}

func TestGatewayDeclinesAndRejects(t *testing.T) {
	g := &gateway.Gateway{}
	declined := strings.Replace(charge, `"c1"`, `"`+gateway.DeclinedCustomerPrefix+`_1"`, 1)
	if code, m, _ := post(t, g, "k2", declined); code != http.StatusPaymentRequired || m["error"] != "card_declined" {
		t.Errorf("got %d %v; want 402 card_declined", code, m)
	}
	if code, _, _ := post(t, g, "k3", strings.Replace(charge, "100", "-1", 1)); code != http.StatusBadRequest {
		t.Errorf("negative amount: got %d; want 400", code)
	}
	if n := len(g.Charges()); n != 0 {
		t.Errorf("got %d charges; want none", n)
	}
}

func TestGatewayFaults(t *testing.T) {
	g := &gateway.Gateway{}
	g.FailNext(2)
	for i := range 2 {
		if code, _, _ := post(t, g, "k4", charge); code != http.StatusServiceUnavailable {
			t.Errorf("request %d: got %d; want 503", i, code)
		}
	}
	if code, _, _ := post(t, g, "k4", charge); code != http.StatusCreated {
		t.Errorf("after the outage: got %d; want 201", code)
	}

	// Random faults: every key is charged once however often it is retried.
	g = &gateway.Gateway{}
	g.SetFaults(0.5, 3)
	failures := 0
	for i := range 50 {
		key := "key-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		body := strings.Replace(charge, `"p1"`, `"`+key+`"`, 1)
		for attempt := 0; ; attempt++ {
			if attempt == 50 {
				t.Fatalf("%s still failing after 50 attempts", key)
			}
			code, _, _ := post(t, g, key, body)
			if code == http.StatusCreated {
				break
			}
			failures++
		}
	}
	if n := len(g.Charges()); n != 50 || failures == 0 {
		t.Errorf("got %d charges after %d failures; want 50 and some failures", n, failures)
	}
}
