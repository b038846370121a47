package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// BenchmarkWarmDuplicates is the sample's batch handler answering a
// redelivered batch of 10 payments it completed itself (its warm cache
// answers, no request goes out), in process: the event decoded from JSON
// as lambda.Start decodes it, the response encoded, the log lines written
// to a pipe as to Lambda's. It is there to be profiled
// (-cpuprofile): the end-to-end bench measures the same path with the
// Runtime API, moto and a second process around it.
func BenchmarkWarmDuplicates(b *testing.B) {
	f := setup(b, nil)
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, r)
	}()
	b.Cleanup(func() { w.Close(); <-drained; r.Close() })
	f.handler = mustHandler(b, f.cfg, f.db, &http.Client{Timeout: time.Second}, lambdakit.NewLogger(w))
	var msgs []events.SQSMessage
	for i := range 10 {
		msgs = append(msgs, lambdakittest.Message(body(fmt.Sprintf("pay_w%d", i), "cus_w", 100+i)))
	}
	if failed := f.run(b, msgs...); len(failed) > 0 {
		b.Fatalf("first delivery: %d failed", len(failed))
	}
	var again []events.SQSMessage
	for _, m := range msgs {
		again = append(again, lambdakittest.Redelivery(m))
	}
	raw, err := json.Marshal(lambdakittest.Event(again...))
	if err != nil {
		b.Fatal(err)
	}
	f.calls.Reset()
	for b.Loop() {
		var ev events.SQSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := f.handler(ctx, ev)
		cancel()
		if err != nil || len(resp.BatchItemFailures) > 0 {
			b.Fatalf("got %v, %v; want no failure", resp.BatchItemFailures, err)
		}
		if _, err := json.Marshal(resp); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := f.calls.Total(); n != 0 {
		b.Errorf("%d DynamoDB requests for warm duplicates; want 0", n)
	}
}
