// Command gatewayfn is the counting gateway of the end-to-end story
// (tools/internal/e2egw) as a Lambda function behind a function URL, for
// the story against a stack on AWS (make e2e with -live): the payment
// function charges there, and the story counts its charges with GET
// /charges. tools/e2e/gateway.yaml deploys it. It keeps its charges in
// memory, so the template holds it to one instance (reserved concurrency
// 1): a new instance (after some idle minutes, or a new deployment) starts
// with no charges and no idempotency keys.
package main

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/lambdakit/lambdakit/tools/internal/e2egw"
)

func main() {
	gw := &e2egw.Handler{}
	lambda.Start(func(ctx context.Context, req events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		return serve(ctx, gw, req), nil
	})
}

// serve answers a function URL request with h.
func serve(ctx context.Context, h http.Handler, req events.LambdaFunctionURLRequest) events.LambdaFunctionURLResponse {
	body := req.Body
	if req.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(req.Body)
		if err != nil {
			return events.LambdaFunctionURLResponse{StatusCode: http.StatusBadRequest, Body: `{"error":"body is not base64"}`}
		}
		body = string(b)
	}
	r, err := http.NewRequestWithContext(ctx, req.RequestContext.HTTP.Method, "https://gateway"+req.RawPath, strings.NewReader(body))
	if err != nil {
		return events.LambdaFunctionURLResponse{StatusCode: http.StatusBadRequest, Body: `{"error":"bad request"}`}
	}
	for k, v := range req.Headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	headers := map[string]string{}
	for k := range w.Header() {
		headers[k] = w.Header().Get(k)
	}
	return events.LambdaFunctionURLResponse{StatusCode: w.Code, Headers: headers, Body: w.Body.String()}
}
