package main

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/tools/internal/e2egw"
)

// Through the function URL's events, a charge asked twice under one
// Idempotency-Key (the second body base64, as Lambda may send it) is
// charged once, and GET /charges counts both requests and the one charge.
func TestChargesAskedTwiceAreCountedAndChargedOnce(t *testing.T) {
	gw := &e2egw.Handler{}
	charge := `{"payment_id":"pay_1","order_id":"o","customer_id":"c","amount":100,"currency":"EUR"}`
	req := func(method, body string, b64 bool) events.LambdaFunctionURLResponse {
		r := events.LambdaFunctionURLRequest{RawPath: "/charges", Body: body, IsBase64Encoded: b64,
			Headers: map[string]string{"idempotency-key": "payment-pay_1", "content-type": "application/json"}}
		r.RequestContext.HTTP.Method = method
		return serve(t.Context(), gw, r)
	}
	first, second := req(http.MethodPost, charge, false), req(http.MethodPost, base64.StdEncoding.EncodeToString([]byte(charge)), true)
	if first.StatusCode != http.StatusCreated || second.StatusCode != first.StatusCode || second.Body != first.Body {
		t.Fatalf("got %d %s, then %d %s; want 201 twice, the same charge", first.StatusCode, first.Body, second.StatusCode, second.Body)
	}
	var counts e2egw.Counts
	if got := req(http.MethodGet, "", false); json.Unmarshal([]byte(got.Body), &counts) != nil || got.StatusCode != http.StatusOK {
		t.Fatalf("GET /charges: %d %s", got.StatusCode, got.Body)
	}
	if want := (e2egw.Count{Requests: 2, Charges: 1}); counts["pay_1"] != want {
		t.Errorf("counts %v; want pay_1 %+v", counts, want)
	}
}
