package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
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

// writeWatcher records whether anything was written to the response.
type writeWatcher struct {
	*httptest.ResponseRecorder
	wrote bool
}

func (w *writeWatcher) WriteHeader(code int) { w.wrote = true; w.ResponseRecorder.WriteHeader(code) }

func (w *writeWatcher) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseRecorder.Write(b)
}

func TestGatewayOnCharge(t *testing.T) {
	g := &gateway.Gateway{}
	type call struct {
		c           gateway.Charge
		id          string
		wroteBefore bool
		recorded    int
	}
	var calls []call
	var w *writeWatcher
	g.OnCharge(func(c gateway.Charge, id string) {
		// Charges takes the gateway's lock: the hook runs outside it, after
		// the charge was recorded and before the answer is written.
		calls = append(calls, call{c, id, w.wrote, len(g.Charges())})
	})
	send := func(key, body string) (int, map[string]any) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		w = &writeWatcher{ResponseRecorder: httptest.NewRecorder()}
		g.ServeHTTP(w, r)
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("answer %q is not JSON: %v", w.Body.String(), err)
		}
		return w.Code, m
	}

	code, first := send("k1", charge)
	if code != http.StatusCreated {
		t.Fatalf("got %d %v; want 201", code, first)
	}
	if len(calls) != 1 {
		t.Fatalf("hook called %d times after one charge; want once", len(calls))
	}
	c := calls[0]
	if c.c.PaymentID != "p1" || c.c.Amount != 100 || c.id != first["charge_id"] {
		t.Errorf("hook got %+v, %q; want payment p1 of 100 and the answer's charge ID %v", c.c, c.id, first["charge_id"])
	}
	if c.wroteBefore || c.recorded != 1 {
		t.Errorf("hook saw written=%v, %d charges recorded; want nothing written yet and the charge recorded", c.wroteBefore, c.recorded)
	}

	// Neither a replay nor a decline nor a refusal is a new charge.
	send("k1", charge)
	send("k2", strings.Replace(charge, `"c1"`, `"`+gateway.DeclinedCustomerPrefix+`_1"`, 1))
	send("k3", strings.Replace(charge, "100", "0", 1))
	if len(calls) != 1 {
		t.Errorf("hook called %d times; want once: replays, declines and refusals are no new charges", len(calls))
	}

	// A charge whose answer is lost still calls the hook: the money is
	// taken all the same.
	g.SetFaults(1, 1)
	for i := 0; len(calls) == 1; i++ {
		if i == 100 {
			t.Fatal("no charge with a lost answer in 100 requests at a fault rate of 1")
		}
		if code, _ := send("lost-"+strconv.Itoa(i), strings.Replace(charge, `"p1"`, `"p-lost"`, 1)); code != http.StatusServiceUnavailable {
			t.Fatalf("got %d; want 503 at a fault rate of 1", code)
		}
	}
	g.SetFaults(0, 1)

	g.OnCharge(nil)
	if code, _ := send("k4", strings.Replace(charge, `"p1"`, `"p4"`, 1)); code != http.StatusCreated || len(calls) != 2 {
		t.Errorf("after OnCharge(nil): got %d and %d hook calls; want 201 and no new call", code, len(calls))
	}
}

func TestGatewayDelay(t *testing.T) {
	t.Run("concurrent requests each wait the delay, side by side", func(t *testing.T) {
		g := &gateway.Gateway{}
		const delay, n = 200 * time.Millisecond, 20
		g.SetDelay(delay)
		srv := httptest.NewServer(g)
		defer srv.Close()
		client := &http.Client{Timeout: 30 * time.Second}
		start := time.Now()
		var wg sync.WaitGroup
		codes := make([]int, n)
		took := make([]time.Duration, n)
		for i := range n {
			wg.Go(func() {
				body := strings.Replace(charge, `"p1"`, `"pd`+strconv.Itoa(i)+`"`, 1)
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", "kd"+strconv.Itoa(i))
				t0 := time.Now()
				resp, err := client.Do(req)
				took[i] = time.Since(t0)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		total := time.Since(start)
		for i := range n {
			if codes[i] != http.StatusCreated || took[i] < delay {
				t.Errorf("request %d: got %d after %v; want 201 after at least %v", i, codes[i], took[i], delay)
			}
		}
		// One after the other they would take n × delay at the very least.
		if total >= n*delay {
			t.Errorf("%d requests took %v together; want less than %v: they must wait side by side", n, total, n*delay)
		}
		if got := len(g.Charges()); got != n {
			t.Errorf("got %d charges; want %d", got, n)
		}
	})

	t.Run("a caller that gives up while waiting is not charged", func(t *testing.T) {
		g := &gateway.Gateway{}
		g.SetDelay(time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(charge)).WithContext(ctx)
		r.Header.Set("Idempotency-Key", "k-gone")
		w := &writeWatcher{ResponseRecorder: httptest.NewRecorder()}
		g.ServeHTTP(w, r)
		if w.wrote || len(g.Charges()) != 0 || g.Requests() != 0 {
			t.Errorf("got answer written %v, %d charges, %d requests counted; want nothing", w.wrote, len(g.Charges()), g.Requests())
		}
	})

	t.Run("SetDelay(0) answers at once again", func(t *testing.T) {
		g := &gateway.Gateway{}
		g.SetDelay(time.Hour)
		g.SetDelay(0)
		if code, _, _ := post(t, g, "k0", charge); code != http.StatusCreated {
			t.Errorf("got %d; want 201", code)
		}
	})
}
