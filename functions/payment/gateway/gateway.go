// Package gateway is a sandbox payment gateway for the demo and the tests:
// POST /charges with Stripe-like Idempotency-Key semantics, declines on
// request, and injected transient failures. It keeps everything in memory.
package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/internal/faultdraw"
)

// Charge is what a caller asks the gateway to charge.
type Charge struct {
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// DeclinedCustomerPrefix marks customers whose cards the sandbox declines
// with 402, as a test card number does at a real gateway.
const DeclinedCustomerPrefix = "cus_declined"

// Gateway is an http.Handler. The zero value is ready to use.
type Gateway struct {
	mu sync.Mutex
	// byKey holds the stored answer for each Idempotency-Key, so a retry
	// gets the same answer and is not charged again.
	byKey   map[string]answer
	charges []Charge
	// failNext answers this many requests with 503 before doing anything.
	failNext int
	requests int
	// faults draws the requests that fail at random (see SetFaults); nil:
	// none.
	faults *faultdraw.Draw
	// onCharge is told of each new charge; see OnCharge.
	onCharge func(c Charge, chargeID string)
	// delay is how long each request to /charges waits before the
	// gateway looks at it; see SetDelay.
	delay time.Duration
}

type answer struct {
	request []byte
	status  int
	body    []byte
}

// reply is what ServeHTTP writes, decided under the lock and written
// outside it.
type reply struct {
	status   int
	body     []byte
	replayed bool // a stored answer, sent again
}

// newCharge is a charge that a request has just made.
type newCharge struct {
	charge Charge
	id     string
}

// FailNext makes the next n requests fail with 503 without charging, as an
// overloaded gateway does.
func (g *Gateway) FailNext(n int) {
	g.mu.Lock()
	g.failNext = n
	g.mu.Unlock()
}

// SetFaults makes a fraction rate of requests fail with 503 at random,
// repeatably for a seed: half before anything happens, half after a new
// charge was made (the answer is lost, as after a timeout). A retry with
// the same Idempotency-Key then gets the stored answer.
func (g *Gateway) SetFaults(rate float64, seed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults = faultdraw.New(rate, seed)
}

// SetDelay makes every request to POST /charges wait d before the gateway
// looks at it, as a real gateway takes its time to answer; 0, the default,
// answers at once. Requests wait side by side, not one after the other, so
// that n calls made at once take d, not n × d: what the benchmark needs to
// show whether a batch's records really run concurrently. A request whose
// caller gives up while it waits is dropped unseen: nothing charged, not
// counted in Requests.
func (g *Gateway) SetDelay(d time.Duration) {
	g.mu.Lock()
	g.delay = max(d, 0)
	g.mu.Unlock()
}

// wait holds a request for the delay SetDelay set, outside the lock. It
// reports false if the request's context ended first.
func (g *Gateway) wait(r *http.Request) bool {
	g.mu.Lock()
	d := g.delay
	g.mu.Unlock()
	if d == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// OnCharge sets fn to be called after each new charge is recorded and
// before its answer is written, outside the gateway's lock, with the charge
// and its ID; nil removes it. A caller that dies while fn runs has paid
// without knowing it, the costliest moment for a crash: tests use fn to kill
// the function there and check that its retry is not charged again. A
// replayed answer (same Idempotency-Key) and a decline are not new charges
// and do not call fn. The answer waits for fn to return.
func (g *Gateway) OnCharge(fn func(c Charge, chargeID string)) {
	g.mu.Lock()
	g.onCharge = fn
	g.mu.Unlock()
}

// Charges returns every charge made, in order. A retry answered from the
// Idempotency-Key store is not a new charge.
func (g *Gateway) Charges() []Charge {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Charge(nil), g.charges...)
}

// Requests is how many requests reached POST /charges.
func (g *Gateway) Requests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/charges" {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
		return
	}
	body, err := readBody(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if !g.wait(r) {
		return // the caller is gone: no one to answer, nothing charged
	}
	rep, charged, hook := g.decide(r.Header.Get("Idempotency-Key"), body)
	if charged != nil && hook != nil {
		hook(charged.charge, charged.id)
	}
	if rep.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeRaw(w, rep.status, rep.body)
}

// decide answers a request, under the lock. It returns the new charge the
// request made, if any, and the OnCharge hook to tell.
func (g *Gateway) decide(key string, body []byte) (reply, *newCharge, func(Charge, string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests++
	before, lost := g.faults.Next()
	if g.failNext > 0 || before {
		if g.failNext > 0 {
			g.failNext--
		}
		return jsonReply(http.StatusServiceUnavailable, "gateway overloaded, retry later"), nil, nil
	}
	if key == "" {
		return jsonReply(http.StatusBadRequest, "Idempotency-Key header is required"), nil, nil
	}
	if prev, ok := g.byKey[key]; ok {
		if !bytes.Equal(prev.request, body) {
			return jsonReply(http.StatusBadRequest, "Idempotency-Key reused with different parameters"), nil, nil
		}
		return reply{status: prev.status, body: prev.body, replayed: true}, nil, nil
	}
	made := len(g.charges)
	a := g.charge(body)
	if g.byKey == nil {
		g.byKey = map[string]answer{}
	}
	g.byKey[key] = a
	var charged *newCharge
	if len(g.charges) > made {
		charged = &newCharge{charge: g.charges[made], id: chargeID(len(g.charges))}
	}
	if lost {
		return jsonReply(http.StatusServiceUnavailable, "upstream timeout"), charged, g.onCharge
	}
	return reply{status: a.status, body: a.body}, charged, g.onCharge
}

func jsonReply(status int, msg string) reply {
	out, _ := json.Marshal(map[string]string{"error": msg})
	return reply{status: status, body: out}
}

// chargeID names the n-th charge (from 1).
func chargeID(n int) string { return fmt.Sprintf("ch_%06d", n) }

// charge decides the answer to a new request. Callers hold g.mu.
func (g *Gateway) charge(body []byte) answer {
	var c Charge
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&c); err != nil {
		return errorAnswer(body, http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	switch {
	case c.PaymentID == "" || c.CustomerID == "":
		return errorAnswer(body, http.StatusBadRequest, "payment_id and customer_id are required")
	case c.Amount <= 0:
		return errorAnswer(body, http.StatusBadRequest, "amount must be positive")
	case len(c.Currency) != 3:
		return errorAnswer(body, http.StatusBadRequest, "currency must be an ISO 4217 code")
	case strings.HasPrefix(c.CustomerID, DeclinedCustomerPrefix):
		return errorAnswer(body, http.StatusPaymentRequired, "card_declined")
	}
	g.charges = append(g.charges, c)
	out, _ := json.Marshal(map[string]any{"charge_id": chargeID(len(g.charges)), "amount": c.Amount, "currency": c.Currency})
	return answer{request: body, status: http.StatusCreated, body: out}
}

func errorAnswer(req []byte, status int, msg string) answer {
	out, _ := json.Marshal(map[string]string{"error": msg})
	return answer{request: req, status: status, body: out}
}

func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, 1<<20)); err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	return buf.Bytes(), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	out, _ := json.Marshal(v)
	writeRaw(w, status, out)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
