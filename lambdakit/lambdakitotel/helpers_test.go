package lambdakitotel_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakitotel"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

const prefix = "pay"

// errDeclined is the failing handler's error; its text names no key.
var errDeclined = errors.New("gateway declined the charge")

// payment is what the test handler reads: a payment that fails when Fail is
// set.
type payment struct {
	PaymentID string `json:"payment_id"`
	Amount    int    `json:"amount"`
	Fail      bool   `json:"fail"`
}

// charge is the record handler under test: it fails the payments marked
// to fail, and otherwise answers with a small JSON result.
var charge = lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	var p payment
	if err := json.Unmarshal([]byte(msg.Body), &p); err != nil {
		return nil, err
	}
	if p.Fail {
		return nil, errDeclined
	}
	return []byte(`{"charged":true}`), nil
})

// recorder returns a provider whose spans end up in the returned recorder.
func recorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return sr, tp
}

func withProvider(tp trace.TracerProvider) func(*lambdakitotel.Options) {
	return func(o *lambdakitotel.Options) { o.TracerProvider = tp }
}

// traced is the whole chain under test:
// WrapBatch(Batch(Chain(h, Middleware, Idempotent(WrapStore(store))))).
func traced(tp trace.TracerProvider, store lambdakit.Store, h lambdakit.Handler, logs *lambdakittest.LogBuffer) lambdakit.BatchFunc {
	idem := lambdakit.Idempotent(lambdakitotel.WrapStore(store, withProvider(tp)), lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) { o.Prefix = prefix; o.Logger = logs.Logger() })
	batch := lambdakit.Batch(lambdakit.Chain(h, lambdakitotel.Middleware(withProvider(tp)), idem),
		func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger(); o.DisableMetrics = true })
	return lambdakitotel.WrapBatch(batch, withProvider(tp))
}

// untraced is the same chain without tracing, to prepare a store.
func untraced(store lambdakit.Store) lambdakit.BatchFunc {
	logs := &lambdakittest.LogBuffer{}
	idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) { o.Prefix = prefix; o.Logger = logs.Logger() })
	return lambdakit.Batch(idem(charge), func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger(); o.DisableMetrics = true })
}

// invocation returns a context as Lambda gives one: a request ID, the
// function's ARN and a deadline.
func invocation(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       "req-0001",
		InvokedFunctionArn: "arn:aws:lambda:us-east-1:123456789012:function:payment",
	})
}

// recordID is the ID Idempotent gives the record of a string key.
func recordID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + "#" + hex.EncodeToString(sum[:])
}

func body(t *testing.T, p payment) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// attr returns a span's attribute, and whether it has it.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrString(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	v, _ := attr(s, k)
	return v.Emit()
}

// missingAttrs lists the attributes of want that s lacks or has otherwise.
func missingAttrs(s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) []string {
	var out []string
	for _, kv := range want {
		v, ok := attr(s, kv.Key)
		if !ok {
			out = append(out, string(kv.Key)+" missing")
		} else if v != kv.Value {
			out = append(out, string(kv.Key)+"="+v.Emit()+", want "+kv.Value.Emit())
		}
	}
	return out
}

// tree sorts the ended spans into the invocation span, the record spans
// (its children, by message ID) and the store spans (by the message ID of
// their parent record span, in start order). Any other span fails t.
type spanTree struct {
	root    sdktrace.ReadOnlySpan
	records map[string]sdktrace.ReadOnlySpan
	store   map[string][]sdktrace.ReadOnlySpan
	all     []sdktrace.ReadOnlySpan
}

func tree(t *testing.T, spans []sdktrace.ReadOnlySpan) spanTree {
	t.Helper()
	tr := spanTree{records: map[string]sdktrace.ReadOnlySpan{}, store: map[string][]sdktrace.ReadOnlySpan{}, all: spans}
	bySpanID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		bySpanID[s.SpanContext().SpanID()] = s
		if !s.Parent().IsValid() {
			if tr.root != nil {
				t.Fatalf("two root spans: %q and %q; want one per invocation", tr.root.Name(), s.Name())
			}
			tr.root = s
		}
	}
	if tr.root == nil {
		t.Fatalf("no root span among %d", len(spans))
	}
	for _, s := range spans {
		if s == tr.root {
			continue
		}
		if s.SpanContext().TraceID() != tr.root.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %s; want the invocation's %s", s.Name(), s.SpanContext().TraceID(), tr.root.SpanContext().TraceID())
		}
		if s.Parent().SpanID() == tr.root.SpanContext().SpanID() {
			id := attrString(s, "messaging.message.id")
			if _, dup := tr.records[id]; dup {
				t.Errorf("two record spans for message %s; want one", id)
			}
			tr.records[id] = s
		}
	}
	for _, s := range spans {
		if s == tr.root || s.Parent().SpanID() == tr.root.SpanContext().SpanID() {
			continue
		}
		parent, ok := bySpanID[s.Parent().SpanID()]
		if !ok || parent.Parent().SpanID() != tr.root.SpanContext().SpanID() {
			t.Errorf("span %q is not a child of a record span", s.Name())
			continue
		}
		id := attrString(parent, "messaging.message.id")
		tr.store[id] = append(tr.store[id], s)
	}
	for id := range tr.store {
		sort.Slice(tr.store[id], func(i, j int) bool { return tr.store[id][i].StartTime().Before(tr.store[id][j].StartTime()) })
	}
	return tr
}

// storeOps lists the operations of a record's store spans, in order.
func storeOps(spans []sdktrace.ReadOnlySpan) []string {
	ops := []string{}
	for _, s := range spans {
		ops = append(ops, attrString(s, lambdakitotel.StoreOperationKey))
	}
	return ops
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
