package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/lambdakit/lambdakit/internal/floor"
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

// BenchmarkNewPaymentsAgainstTheFloor runs batches of 10 new payments, with
// payment.charged on the record, through the sample and through the
// bench's floor (internal/floor) in this process, with the network
// taken out: DynamoDB's answers come from answeringDB and the gateway's
// from answeringGateway, at once. What is left is each function's own
// code, the SDK's request building excepted, and its garbage collection:
// where make bench's CPU comparison cannot see a change of a point or
// two, this can (cpu-µs/record, from the process's CPU time over the
// loop, and allocations per batch). Each function is made anew every 260
// batches, as a container of make bench serves a few thousand records:
// the floor keeps every payment it completed.
func BenchmarkNewPaymentsAgainstTheFloor(b *testing.B) {
	const eventsQueue = "http://127.0.0.1:1/123456789012/payment-events.fifo"
	client := &http.Client{Timeout: 5 * time.Second, Transport: answeringGateway{}}
	functions := map[string]func(b *testing.B) lambdakit.BatchFunc{
		"lambdakit": func(b *testing.B) lambdakit.BatchFunc {
			return mustHandler(b, config{PaymentsTable: "payments", GatewayURL: "http://gateway", EventsQueueURL: eventsQueue},
				answeringDB{}, client, lambdakit.NewLogger(io.Discard), func(o *lambdakit.BatchOptions) { o.MetricsWriter = io.Discard })
		},
		"floor": func(*testing.B) lambdakit.BatchFunc {
			return floor.New(floor.Config{DB: answeringDB{}, HTTP: client, Table: "payments", GatewayURL: "http://gateway",
				EventsURL: eventsQueue, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		},
	}
	for _, name := range []string{"lambdakit", "floor"} {
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			batches := make([]events.SQSEvent, b.N)
			for i := range batches {
				for j := range 10 {
					id := "pay_" + name + strconv.Itoa(i*10+j)
					batches[i].Records = append(batches[i].Records, lambdakittest.Message(body(id, "cus_1", 1250)))
				}
			}
			var h lambdakit.BatchFunc
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				if i%260 == 0 {
					h = functions[name](b)
				}
				resp, err := h(ctx, batches[i])
				if err != nil || len(resp.BatchItemFailures) > 0 {
					b.Fatalf("batch %d: %v, %v; want no failure", i, resp.BatchItemFailures, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(10*b.N), "cpu-µs/record")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// answeringDB answers every request as DynamoDB answers a new payment's
// (the lock taken, the completion applied), at once, and keeps nothing.
type answeringDB struct{}

func (answeringDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return &dynamodb.PutItemOutput{}, nil
}

func (answeringDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, nil
}

func (answeringDB) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, nil
}

func (answeringDB) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func (answeringDB) BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return &dynamodb.BatchGetItemOutput{}, nil
}

// answeringGateway charges every payment at once, with a charge ID of its
// own.
type answeringGateway struct{}

func (answeringGateway) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	answer := `{"charge_id":"ch_` + r.Header.Get("Idempotency-Key") + `"}`
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader([]byte(answer))), Request: r}, nil
}
