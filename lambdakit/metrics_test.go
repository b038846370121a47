package lambdakit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// emfLine parses one Embedded Metric Format line and checks the members
// the specification requires: _aws.Timestamp in epoch milliseconds, and in
// _aws.CloudWatchMetrics a Namespace, Dimensions as arrays of member names,
// and Metrics as {Name, Unit}, with every dimension a top-level string and
// every metric a top-level number; at most 100 metrics and 30 dimensions a
// directive.
func emfLine(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("metrics line %q is not JSON: %v", line, err)
	}
	aws, ok := m["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws object in %s", line)
	}
	ts, ok := aws["Timestamp"].(float64)
	if now := float64(time.Now().UnixMilli()); !ok || ts < now-60_000 || ts > now+1000 {
		t.Errorf("_aws.Timestamp = %v; want epoch milliseconds, now", aws["Timestamp"])
	}
	directives, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(directives) == 0 {
		t.Fatalf("_aws.CloudWatchMetrics = %v; want a non-empty array", aws["CloudWatchMetrics"])
	}
	for _, d := range directives {
		dir := d.(map[string]any)
		if ns, _ := dir["Namespace"].(string); ns == "" {
			t.Errorf("directive without a Namespace: %v", dir)
		}
		sets, _ := dir["Dimensions"].([]any)
		for _, set := range sets {
			names := set.([]any)
			if len(names) > 30 {
				t.Errorf("dimension set of %d; want at most 30", len(names))
			}
			for _, n := range names {
				if _, ok := m[n.(string)].(string); !ok {
					t.Errorf("dimension %v is not a top-level string member", n)
				}
			}
		}
		metrics, _ := dir["Metrics"].([]any)
		if len(metrics) == 0 || len(metrics) > 100 {
			t.Errorf("got %d metrics; want 1 to 100", len(metrics))
		}
		for _, mt := range metrics {
			def := mt.(map[string]any)
			name, _ := def["Name"].(string)
			if _, ok := m[name].(float64); !ok {
				t.Errorf("metric %q is not a top-level number", name)
			}
			if u, _ := def["Unit"].(string); u != "Count" && u != "Milliseconds" && u != "Seconds" {
				t.Errorf("metric %q has unit %q", name, u)
			}
		}
	}
	return m
}

// One batch with an outcome of each kind writes one metrics line that
// counts each (with DetailedMetrics, every count).
func TestBatchMetricsLine(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "pay-fn")
	store := &lambdakittest.MemoryStore{}
	seen := lambdakittest.Message(paymentBody("m-dup", 1))
	completeAll(t, store, []events.SQSMessage{seen})
	// A lock held elsewhere, for the in-progress failure.
	held := lambdakittest.Message(paymentBody("m-busy", 1))
	gate := make(chan struct{})
	holder := idempotent(store, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		<-gate
		return nil, nil
	}))
	go func() { _, _ = handle(t, holder, held) }()
	defer close(gate)
	waitFor(t, func() bool { return store.Calls().Acquire >= 2 })

	h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if strings.Contains(msg.Body, "m-fail") {
			return nil, errors.New("gateway down")
		}
		return []byte(`"ok"`), nil
	}), func(o *lambdakit.Options) { o.CacheSize = 10 })
	var out bytes.Buffer
	b := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = silentLogger()
		o.MetricsWriter = &out
		o.MetricsNamespace = "payments"
		o.DetailedMetrics = true
		// In batch order: the duplicate reaches the store before the
		// mismatch with its key has put the record in the cache.
		o.Concurrency = 1
	})
	msgs := []events.SQSMessage{
		lambdakittest.Message(paymentBody("m-new", 1)),                   // processed
		lambdakittest.Message(seen.Body),                                 // duplicate from the store, replayed
		lambdakittest.Message(paymentBody("m-dup", 2)),                   // payload mismatch
		lambdakittest.Message(paymentBody("m-busy", 1)),                  // in progress
		lambdakittest.Message(`{"amount":1}`),                            // no key
		lambdakittest.Message(paymentBody("m-fail", 1)),                  // handler error
		lambdakittest.Message(`{"payment_id":"m-bad","PAYMENT_ID":"x"}`), // invalid key
	}
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("got %d metrics lines; want 1 per invocation", len(lines))
	}
	m := emfLine(t, lines[0])
	want := map[string]float64{
		"Records": 7, "Succeeded": 2, "Failed": 5,
		"FailedPayloadMismatch": 1, "FailedInProgress": 1, "FailedNoKey": 2, "FailedHandlerError": 1,
		"FailedDeadline": 0, "FailedLeaseLost": 0, "FailedStoreError": 0, "FailedSkipped": 0,
		"DuplicatesFromStore": 1, "DuplicatesFromCache": 0, "Replayed": 1,
	}
	for name, v := range want {
		if m[name] != v {
			t.Errorf("%s = %v; want %v", name, m[name], v)
		}
	}
	if m["FunctionName"] != "pay-fn" || m["QueueName"] != "lambdakit-test" {
		t.Errorf("dimensions %v, %v; want pay-fn, lambdakit-test", m["FunctionName"], m["QueueName"])
	}
	if ns := m["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Namespace"]; ns != "payments" {
		t.Errorf("namespace %v; want payments", ns)
	}
	p50, _ := m["StoreLatencyP50"].(float64)
	maxLat, _ := m["StoreLatencyMax"].(float64)
	batch, _ := m["BatchDuration"].(float64)
	if p50 <= 0 || maxLat < p50 || batch < maxLat {
		t.Errorf("store latency p50 %v, max %v, batch %v ms; want 0 < p50 <= max <= batch", p50, maxLat, batch)
	}

	// The same batch again in this warm container: duplicates from the
	// cache now.
	out.Reset()
	again := []events.SQSMessage{lambdakittest.Message(paymentBody("m-new", 1))}
	if _, err := b(batchCtx(t), lambdakittest.Event(again...)); err != nil {
		t.Fatal(err)
	}
	if m := emfLine(t, bytes.TrimSpace(out.Bytes())); m["DuplicatesFromCache"] != 1.0 || m["Replayed"] != 1.0 {
		t.Errorf("got %v from the cache, %v replayed; want 1 and 1", m["DuplicatesFromCache"], m["Replayed"])
	}

	t.Run("off with one option", func(t *testing.T) {
		var out bytes.Buffer
		b := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
			o.Logger = silentLogger()
			o.MetricsWriter = &out
			o.DisableMetrics = true
		})
		if _, err := b(batchCtx(t), lambdakittest.Event(lambdakittest.Message(paymentBody("m-off", 1)))); err != nil {
			t.Fatal(err)
		}
		if out.Len() != 0 {
			t.Errorf("got %q; want no metrics line", out.String())
		}
	})
}

// At DEBUG every record gets one log line with its message ID, its hashed
// key (never the raw key), its outcome and duration; the default logger
// adds the Lambda request ID and follows AWS_LAMBDA_LOG_LEVEL, below which
// only failures are logged.
func TestBatchRecordLogLines(t *testing.T) {
	run := func(t *testing.T, level string) []map[string]any {
		t.Helper()
		t.Setenv("AWS_LAMBDA_LOG_LEVEL", level)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := os.Stderr
		os.Stderr = w // the default logger writes where os.Stderr is when Batch is made
		store := &lambdakittest.MemoryStore{}
		h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"))(charger(&testenv.Counter{}))
		b := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.MetricsWriter = io.Discard })
		os.Stderr = stderr
		ctx := lambdacontext.NewContext(batchCtx(t), &lambdacontext.LambdaContext{AwsRequestID: "req-42"})
		first := lambdakittest.Message(paymentBody("secret-key-1", 1))
		_, _ = b(ctx, lambdakittest.Event(first, lambdakittest.Message(first.Body), lambdakittest.Message(`{"amount":2}`)))
		w.Close()
		raw, _ := io.ReadAll(r)
		var lines []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			if strings.Contains(string(l), "secret-key-1") {
				t.Errorf("log line %s holds the raw key", l)
			}
			lines = append(lines, m)
		}
		return lines
	}
	t.Run("DEBUG: a line per record, each with the request ID", func(t *testing.T) {
		lines := run(t, "DEBUG")
		outcomes := map[string]int{}
		for _, l := range lines {
			if l["requestId"] != "req-42" {
				t.Errorf("line %v: got requestId %v; want req-42", l, l["requestId"])
			}
			if l["messageId"] == nil || l["durationMs"] == nil {
				t.Errorf("line %v: want messageId and durationMs", l)
			}
			outcomes[l["outcome"].(string)]++
		}
		if outcomes["processed"] != 1 || outcomes["replayed"] != 1 || outcomes["failed"] != 1 || len(lines) != 3 {
			t.Errorf("got outcomes %v in %d lines; want processed, replayed and failed, one each", outcomes, len(lines))
		}
	})
	for _, level := range []string{"", "INFO", "error"} {
		t.Run(level+": only the failure", func(t *testing.T) {
			lines := run(t, level)
			if len(lines) != 1 || lines[0]["outcome"] != "failed" || lines[0]["reasonCode"] != "NoKey" || lines[0]["requestId"] != "req-42" {
				t.Errorf("got %v; want one failure line, reason NoKey, with the request ID", lines)
			}
		})
	}
}

// Middleware outside Idempotent can tell a replayed result from a fresh one.
func TestReplayedTellsDuplicates(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	got := map[string]bool{}
	outer := func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			res, err := next.Handle(ctx, msg)
			got[msg.MessageId] = lambdakit.Replayed(ctx)
			return res, err
		})
	}
	h := lambdakit.Chain(charger(&testenv.Counter{}), outer, lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), quiet))
	b, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.Concurrency = 1; o.MetricsWriter = io.Discard })
	first := lambdakittest.Message(paymentBody("rp-1", 1))
	again := lambdakittest.Message(first.Body)
	if _, err := b(batchCtx(t), lambdakittest.Event(first, again)); err != nil {
		t.Fatal(err)
	}
	if got[first.MessageId] || !got[again.MessageId] {
		t.Errorf("got Replayed %v for the first and %v for the duplicate; want false, true", got[first.MessageId], got[again.MessageId])
	}
}

// A record sent to the dead-letter queue is reported done to SQS, but
// counted as a failure, by reason Permanent.
func TestBatchMetricsCountDeadLettersAsPermanentFailures(t *testing.T) {
	var out bytes.Buffer
	dlq := &deadLetters{}
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, lambdakit.Permanent(errors.New("bad format"))
	})
	b, log := newBatch(h, func(o *lambdakit.BatchOptions) {
		o.DeadLetters = dlq
		o.MetricsWriter = &out
		o.DetailedMetrics = true
	})
	poison := lambdakittest.Message("poison")
	resp, err := b(batchCtx(t), lambdakittest.Event(poison))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("got %v, %v; want the record handled", resp.BatchItemFailures, err)
	}
	m := emfLine(t, bytes.TrimSpace(out.Bytes()))
	if m["Failed"] != 1.0 || m["FailedPermanent"] != 1.0 || m["Succeeded"] != 0.0 {
		t.Errorf("got Failed %v, FailedPermanent %v, Succeeded %v; want 1, 1, 0", m["Failed"], m["FailedPermanent"], m["Succeeded"])
	}
	if line := log.byMessageID(t)[poison.MessageId]; line["outcome"] != "dead-lettered" || line["reasonCode"] != "Permanent" {
		t.Errorf("log line %v; want outcome dead-lettered, reasonCode Permanent", line)
	}
}

// By default the metrics line goes to standard output inside a Lambda
// runtime, and nowhere elsewhere.
func TestBatchMetricsDefaultWriter(t *testing.T) {
	for _, inLambda := range []bool{true, false} {
		api := ""
		if inLambda {
			api = "127.0.0.1:9001"
		}
		t.Setenv("AWS_LAMBDA_RUNTIME_API", api)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout := os.Stdout
		os.Stdout = w // the default writer is os.Stdout as it is when Batch is made
		b := lambdakit.Batch(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil }),
			func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
		os.Stdout = stdout
		if _, err := b(batchCtx(t), lambdakittest.Event(lambdakittest.Message("x"))); err != nil {
			t.Fatal(err)
		}
		w.Close()
		out, _ := io.ReadAll(r)
		if got := bytes.Contains(out, []byte(`"_aws"`)); got != inLambda {
			t.Errorf("in a Lambda runtime %v: got a metrics line %v (%q); want %v", inLambda, got, out, inLambda)
		}
	}
}

// Invocations running at once in one process (Lambda Managed Instances)
// share the metrics writer: each line names the invocation it counts.
func TestBatchMetricsLineNamesItsInvocation(t *testing.T) {
	started := make(chan struct{}, 5)
	both := make(chan struct{})
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		started <- struct{}{}
		<-both // every record of both batches is running
		return nil, nil
	})
	out := &logline.Buffer{}
	b := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = silentLogger()
		o.MetricsWriter = out
		o.DetailedMetrics = true
	})
	sizes := map[string]int{"req-a": 2, "req-b": 3}
	var invocations []func() error
	for id, n := range sizes {
		ctx := lambdacontext.NewContext(batchCtx(t), &lambdacontext.LambdaContext{AwsRequestID: id})
		invocations = append(invocations, func() error {
			_, err := b(ctx, lambdakittest.Event(tenMessages(0)[:n]...))
			return err
		})
	}
	together(t, 5, started, both, invocations...)
	lines := bytes.Split(bytes.TrimSpace([]byte(out.String())), []byte("\n"))
	if len(lines) != len(sizes) {
		t.Fatalf("got %d metrics lines; want one per invocation:\n%s", len(lines), out)
	}
	for _, line := range lines {
		m := emfLine(t, line)
		id, _ := m["requestId"].(string)
		if want, ok := sizes[id]; !ok || m["Records"] != float64(want) {
			t.Errorf("line for requestId %q counts %v records; want a line per invocation, req-a with 2 and req-b with 3:\n%s", id, m["Records"], line)
		}
		delete(sizes, id)
	}
}
