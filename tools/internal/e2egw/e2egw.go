// Package e2egw is the gateway of the end-to-end story (tools/e2e): the
// sample's sandbox gateway (functions/payment/gateway), which charges each
// Idempotency-Key once, with what the story counts from the outside: GET
// /charges answers, per payment ID, how many charge requests came and how
// many charges were made.
package e2egw

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
)

// Count is what the gateway saw of one payment.
type Count struct {
	Requests int `json:"requests"`
	Charges  int `json:"charges"`
}

// Counts are the Count of each payment ID, the answer of GET /charges.
type Counts map[string]Count

// Handler is the counting gateway. The zero value is ready to use.
type Handler struct {
	gw       gateway.Gateway
	mu       sync.Mutex
	requests map[string]int
}

// maxBody bounds what a charge request is read for: a payment is a few
// hundred bytes.
const maxBody = 64 << 10

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/charges" && r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.Counts())
		return
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, `{"error":"reading the body"}`, http.StatusBadRequest)
			return
		}
		var c gateway.Charge
		if json.Unmarshal(body, &c) == nil && c.PaymentID != "" {
			h.mu.Lock()
			if h.requests == nil {
				h.requests = map[string]int{}
			}
			h.requests[c.PaymentID]++
			h.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	h.gw.ServeHTTP(w, r)
}

// Counts is what the gateway saw, per payment ID.
func (h *Handler) Counts() Counts {
	h.mu.Lock()
	out := Counts{}
	for id, n := range h.requests {
		out[id] = Count{Requests: n}
	}
	h.mu.Unlock()
	for _, c := range h.gw.Charges() {
		n := out[c.PaymentID]
		n.Charges++
		out[c.PaymentID] = n
	}
	return out
}
