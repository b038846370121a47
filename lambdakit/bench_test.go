package lambdakit_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The benchmarks measure what the toolkit adds per record on the idempotent
// path: key extraction, hashing, lock, completion, with the in-memory store
// and a handler that does nothing (noop).

func benchMessages(n int) []events.SQSMessage {
	msgs := make([]events.SQSMessage, n)
	for i := range msgs {
		msgs[i] = lambdakittest.Message(`{"payment_id":"pay_` + strconv.Itoa(i) +
			`","order_id":"ord_1","customer_id":"cus_1","amount":1299,"currency":"EUR"}`)
	}
	return msgs
}

func BenchmarkIdempotentNewKey(b *testing.B) {
	// A fresh store and middleware every chunk of messages keeps the live
	// heap as small as a Lambda container's, so that the figure is the
	// middleware's cost and not the garbage collector's on a huge map.
	const chunk = 1024
	msgs := benchMessages(chunk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var h lambdakit.Handler
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%chunk == 0 {
			b.StopTimer()
			h = idempotent(&lambdakittest.MemoryStore{}, noop)
			b.StartTimer()
		}
		if _, err := h.Handle(ctx, &msgs[i%chunk]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIdempotentDuplicate(b *testing.B) { benchDuplicate(b) }

func BenchmarkIdempotentDuplicateWarmCache(b *testing.B) {
	benchDuplicate(b, func(o *lambdakit.Options) { o.CacheSize = 128 })
}

// benchDuplicate measures a message that was completed before.
func benchDuplicate(b *testing.B, opts ...func(*lambdakit.Options)) {
	h := idempotent(&lambdakittest.MemoryStore{}, noop, opts...)
	msgs := benchMessages(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := h.Handle(ctx, &msgs[0]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := h.Handle(ctx, &msgs[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatch10NewKeys is a whole invocation: a batch of 10 new records
// through the adapter and the idempotency middleware, with its per-record
// log lines and its metrics line (both discarded). ns/op is per batch.
func BenchmarkBatch10NewKeys(b *testing.B) { benchBatch10(b) }

// BenchmarkBatch10NewKeysNoMetrics is the same without the metrics line,
// to show what the metrics cost.
func BenchmarkBatch10NewKeysNoMetrics(b *testing.B) {
	benchBatch10(b, func(o *lambdakit.BatchOptions) { o.DisableMetrics = true })
}

func benchBatch10(b *testing.B, optFns ...func(*lambdakit.BatchOptions)) {
	const chunk = 1024
	msgs := benchMessages(chunk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var batch lambdakit.BatchFunc
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := (10 * i) % (chunk - chunk%10)
		if start == 0 {
			b.StopTimer()
			batch = lambdakit.Batch(idempotent(&lambdakittest.MemoryStore{}, noop), append([]func(*lambdakit.BatchOptions){func(o *lambdakit.BatchOptions) {
				o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
				o.MetricsWriter = io.Discard
			}}, optFns...)...)
			b.StartTimer()
		}
		resp, err := batch(ctx, events.SQSEvent{Records: msgs[start : start+10]})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			b.Fatal(err, resp)
		}
	}
}

// BenchmarkBatch10Duplicates is a batch of 10 records completed earlier,
// redelivered to a container that does not remember them: the store
// answers each one. ns/op is per batch.
func BenchmarkBatch10Duplicates(b *testing.B) {
	msgs := benchMessages(10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	batch := lambdakit.Batch(idempotent(&lambdakittest.MemoryStore{}, noop), func(o *lambdakit.BatchOptions) {
		o.Logger = silentLogger()
	})
	if resp, err := batch(ctx, events.SQSEvent{Records: msgs}); err != nil || len(resp.BatchItemFailures) != 0 {
		b.Fatal(err, resp)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := batch(ctx, events.SQSEvent{Records: msgs})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			b.Fatal(err, resp)
		}
	}
}

// BenchmarkPaymentKeyAndPayloadHash is what a payment record costs before
// the store is asked: its key, its record ID and its payload's hash, as the
// payment sample reads them (KeyFromField and PayloadFields).
func BenchmarkPaymentKeyAndPayloadHash(b *testing.B) {
	key := lambdakit.KeyFromField("payment_id")
	payload := lambdakit.PayloadFields("payment_id", "order_id", "customer_id", "amount", "currency")
	msg := benchMessages(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		k, err := key(&msg)
		if err != nil {
			b.Fatal(err)
		}
		p, err := payload(&msg)
		if err != nil {
			b.Fatal(err)
		}
		if lambdakit.RecordID("payments", k) == "" || lambdakit.KeyHash(p) == "" {
			b.Fatal("empty hash")
		}
	}
}

// BenchmarkPayloadBodyHash is the default payload's hash of a small body
// with a nested object and an array.
func BenchmarkPayloadBodyHash(b *testing.B) {
	msg := lambdakittest.Message(`{"payment_id":"pay_1","amount":{"value":1299,"currency":"EUR"},"lines":[{"sku":"a","qty":2},{"sku":"b","qty":1}]}`)
	b.ReportAllocs()
	for b.Loop() {
		p, err := lambdakit.PayloadBody(&msg)
		if err != nil {
			b.Fatal(err)
		}
		if lambdakit.KeyHash(p) == "" {
			b.Fatal("empty hash")
		}
	}
}
