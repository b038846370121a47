package lambdakitotel_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakitotel"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// A batch of a new payment, a duplicate, a failing one, a payload mismatch
// and a message without a key makes one invocation span, one record span
// each, and one span per store request, nested through the context, with
// the outcome of each record as the batch's own log line has it.
func TestSpanTreeOfABatch(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// Completed before, untraced: the duplicate and the mismatch find them.
	if _, err := untraced(store)(invocation(t), lambdakittest.Event(
		lambdakittest.Message(body(t, payment{PaymentID: "pay_done", Amount: 100})),
		lambdakittest.Message(body(t, payment{PaymentID: "pay_done2", Amount: 200})),
	)); err != nil {
		t.Fatal(err)
	}
	before := store.Calls()

	sr, tp := recorder(t)
	logs := &lambdakittest.LogBuffer{}
	mNew := lambdakittest.Message(body(t, payment{PaymentID: "pay_new", Amount: 100}))
	mDup := lambdakittest.Message(body(t, payment{PaymentID: "pay_done", Amount: 100}))
	mFail := lambdakittest.Message(body(t, payment{PaymentID: "pay_fail", Amount: 100, Fail: true}))
	mMismatch := lambdakittest.Message(body(t, payment{PaymentID: "pay_done2", Amount: 999}))
	mNoKey := lambdakittest.Message(`{"amount":1}`)
	resp, err := traced(tp, store, charge, logs)(invocation(t), lambdakittest.Event(mNew, mDup, mFail, mMismatch, mNoKey))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if got := len(resp.BatchItemFailures); got != 3 {
		t.Fatalf("%d failures reported; want 3 (failing, mismatch, no key)", got)
	}

	ended := sr.Ended()
	if got, started := len(ended), len(sr.Started()); got != started {
		t.Errorf("%d spans ended of %d started; want every span ended", got, started)
	}
	calls := store.Calls()
	storeCalls := calls.Total() - before.Total()
	// 1 invocation + 5 records + 6 store requests (new: acquire, complete;
	// duplicate: acquire; failing: acquire, release; mismatch: acquire).
	if got, want := len(ended), 1+5+6; got != want || storeCalls != 6 {
		t.Errorf("%d spans for %d store requests; want %d spans for 6 requests", got, storeCalls, want)
	}
	tr := tree(t, ended)

	t.Run("invocation span", func(t *testing.T) {
		root := tr.root
		if root.Name() != "process lambdakit-test" || root.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("invocation span %q, kind %v; want \"process lambdakit-test\", consumer", root.Name(), root.SpanKind())
		}
		for _, miss := range missingAttrs(root,
			semconv.MessagingSystemAWSSQS,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
			semconv.FaaSTriggerPubSub,
			semconv.MessagingBatchMessageCount(5),
			semconv.MessagingDestinationName("lambdakit-test"),
			semconv.FaaSInvocationID("req-0001"),
			semconv.CloudAccountID("123456789012"),
			semconv.AWSLambdaInvokedARN("arn:aws:lambda:us-east-1:123456789012:function:payment"),
			lambdakitotel.QueueARNKey.String(lambdakittest.StandardQueueARN),
			lambdakitotel.FailedCountKey.Int(3),
		) {
			t.Errorf("invocation span: %s", miss)
		}
		if root.Status().Code != codes.Unset {
			t.Errorf("invocation status %v; want unset: a partial batch response is no error", root.Status())
		}
		if got := root.InstrumentationScope().Name; got != lambdakitotel.InstrumentationName {
			t.Errorf("scope %q; want %q", got, lambdakitotel.InstrumentationName)
		}
		if got := root.InstrumentationScope().SchemaURL; got != semconv.SchemaURL {
			t.Errorf("schema URL %q; want %q", got, semconv.SchemaURL)
		}
	})

	type want struct {
		outcome, reason string
		ops             []string
	}
	cases := map[string]struct {
		msg events.SQSMessage
		want
	}{
		"new":       {mNew, want{"processed", "", []string{"acquire", "complete"}}},
		"duplicate": {mDup, want{"duplicate", "", []string{"acquire"}}},
		"failing":   {mFail, want{"failed", "HandlerError", []string{"acquire", "release"}}},
		"mismatch":  {mMismatch, want{"failed", "PayloadMismatch", []string{"acquire"}}},
		"no key":    {mNoKey, want{"failed", "NoKey", []string{}}},
	}
	if len(tr.records) != len(cases) {
		t.Errorf("%d record spans; want %d", len(tr.records), len(cases))
	}
	for name, c := range cases {
		t.Run("record "+name, func(t *testing.T) {
			s, ok := tr.records[c.msg.MessageId]
			if !ok {
				t.Fatalf("no record span for message %s", c.msg.MessageId)
			}
			if s.Name() != "process lambdakit-test" || s.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("record span %q, kind %v; want \"process lambdakit-test\", consumer", s.Name(), s.SpanKind())
			}
			for _, miss := range missingAttrs(s,
				semconv.MessagingSystemAWSSQS,
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingMessageID(c.msg.MessageId),
				semconv.MessagingDestinationName("lambdakit-test"),
				semconv.MessagingMessageBodySize(len(c.msg.Body)),
				lambdakitotel.ReceiveCountKey.Int(1),
				lambdakitotel.OutcomeKey.String(c.outcome),
			) {
				t.Errorf("record span: %s", miss)
			}
			reason, hasReason := attr(s, lambdakitotel.ReasonKey)
			if c.reason == "" {
				if hasReason || s.Status().Code != codes.Unset {
					t.Errorf("reason %q, status %v; want no reason, status unset", reason.Emit(), s.Status())
				}
			} else {
				if reason.AsString() != c.reason || attrString(s, semconv.ErrorTypeKey) != c.reason {
					t.Errorf("reason %q, error.type %q; want %q", reason.Emit(), attrString(s, semconv.ErrorTypeKey), c.reason)
				}
				if s.Status().Code != codes.Error || s.Status().Description == "" {
					t.Errorf("status %v; want error with a description", s.Status())
				}
			}
			if got := storeOps(tr.store[c.msg.MessageId]); !reflect.DeepEqual(got, c.ops) {
				t.Errorf("store spans %v; want %v", got, c.ops)
			}
			var key payment
			_ = jsonUnmarshal(c.msg.Body, &key)
			for _, st := range tr.store[c.msg.MessageId] {
				op := attrString(st, lambdakitotel.StoreOperationKey)
				if st.Name() != "lambdakit.store."+op || st.SpanKind() != trace.SpanKindInternal {
					t.Errorf("store span %q, kind %v; want lambdakit.store.%s, internal", st.Name(), st.SpanKind(), op)
				}
				if got := attrString(st, lambdakitotel.RecordIDKey); got != recordID(key.PaymentID) {
					t.Errorf("%s span: record ID %q; want %q", op, got, recordID(key.PaymentID))
				}
				if st.Status().Code != codes.Unset {
					t.Errorf("%s span: status %v; want unset", op, st.Status())
				}
			}
		})
	}
	t.Run("acquire outcomes", func(t *testing.T) {
		for _, c := range []struct {
			msg      events.SQSMessage
			acquired bool
			existing string
		}{{mNew, true, ""}, {mFail, true, ""}, {mDup, false, "COMPLETED"}, {mMismatch, false, "COMPLETED"}} {
			acq := tr.store[c.msg.MessageId][0]
			got, _ := attr(acq, lambdakitotel.AcquiredKey)
			if got.AsBool() != c.acquired || attrString(acq, lambdakitotel.ExistingStatusKey) != c.existing {
				t.Errorf("message %s: acquired=%v existing=%q; want %v %q", c.msg.MessageId, got.AsBool(),
					attrString(acq, lambdakitotel.ExistingStatusKey), c.acquired, c.existing)
			}
		}
	})
	t.Run("outcomes agree with the log lines", func(t *testing.T) {
		agreeWithLogs(t, logs, tr)
	})
	t.Run("no raw key in any span", func(t *testing.T) {
		noneContains(t, ended, "pay_new", "pay_done", "pay_fail")
	})
}

// agreeWithLogs checks that each record span says what the batch's log
// line for the record says: the same reason code, and processed or a
// duplicate alike.
func agreeWithLogs(t *testing.T, logs *lambdakittest.LogBuffer, tr spanTree) {
	t.Helper()
	n := 0
	for _, line := range logs.Lines(t) {
		if line["msg"] != "message done" && line["msg"] != "message failed" {
			continue
		}
		n++
		id, _ := line["messageId"].(string)
		s, ok := tr.records[id]
		if !ok {
			t.Errorf("no record span for the logged message %s", id)
			continue
		}
		outcome, reason := attrString(s, lambdakitotel.OutcomeKey), attrString(s, lambdakitotel.ReasonKey)
		switch line["outcome"] {
		case "failed":
			if outcome != "failed" || reason != line["reasonCode"] {
				t.Errorf("message %s: span %s/%s; log failed/%v", id, outcome, reason, line["reasonCode"])
			}
		case "duplicate", "replayed":
			if outcome != "duplicate" {
				t.Errorf("message %s: span %s; log %v", id, outcome, line["outcome"])
			}
		default:
			if outcome != "processed" {
				t.Errorf("message %s: span %s; log %v", id, outcome, line["outcome"])
			}
		}
	}
	if n != len(tr.records) {
		t.Errorf("%d record log lines for %d record spans; want one each", n, len(tr.records))
	}
}

// noneContains fails t if any attribute, status description or event
// attribute of spans contains one of words.
func noneContains(t *testing.T, spans []sdktrace.ReadOnlySpan, words ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, kv.Value.Emit())
		}
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, text := range texts {
			for _, w := range words {
				if strings.Contains(text, w) {
					t.Errorf("span %q holds %q: %q", s.Name(), w, text)
				}
			}
		}
	}
}

// A re-driven batch is read ahead through the wrapped store: one
// get_records request, no acquire, and every record a duplicate. A wrapper
// that hid BatchGetter would cost one acquire per record instead.
func TestReadAheadThroughWrapStore(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	var first []events.SQSMessage
	for i := range 3 {
		first = append(first, lambdakittest.Message(body(t, payment{PaymentID: fmt.Sprintf("pay_%d", i), Amount: 10})))
	}
	if _, err := untraced(store)(invocation(t), lambdakittest.Event(first...)); err != nil {
		t.Fatal(err)
	}
	before := store.Calls()

	sr, tp := recorder(t)
	var again []events.SQSMessage
	for _, m := range first {
		again = append(again, lambdakittest.Redelivery(m))
	}
	resp, err := traced(tp, store, charge, &lambdakittest.LogBuffer{})(invocation(t), lambdakittest.Event(again...))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch: %v, %d failures; want none", err, len(resp.BatchItemFailures))
	}
	after := store.Calls()
	if gets, acquires := after.GetRecords-before.GetRecords, after.Acquire-before.Acquire; gets != 1 || acquires != 0 {
		t.Errorf("%d GetRecords and %d Acquire requests; want 1 and 0 (read ahead)", gets, acquires)
	}
	tr := tree(t, sr.Ended())
	var gets []sdktrace.ReadOnlySpan
	for id, spans := range tr.store {
		for _, s := range spans {
			if attrString(s, lambdakitotel.StoreOperationKey) != "get_records" {
				t.Errorf("message %s: store span %q; want only the read ahead", id, s.Name())
				continue
			}
			gets = append(gets, s)
		}
	}
	if len(gets) != 1 {
		t.Fatalf("%d get_records spans; want 1", len(gets))
	}
	for _, miss := range missingAttrs(gets[0], lambdakitotel.RequestedKey.Int(3), lambdakitotel.FoundKey.Int(3)) {
		t.Errorf("get_records span: %s", miss)
	}
	for id, s := range tr.records {
		if got := attrString(s, lambdakitotel.OutcomeKey); got != "duplicate" {
			t.Errorf("message %s: outcome %s; want duplicate", id, got)
		}
	}
}

func TestWrapStoreKeepsBatchGetterExactlyWhenTheStoreHasIt(t *testing.T) {
	mem := &lambdakittest.MemoryStore{}
	if _, ok := lambdakitotel.WrapStore(mem).(lambdakit.BatchGetter); !ok {
		t.Error("WrapStore(MemoryStore) is no BatchGetter; want one, as the store is")
	}
	if _, ok := lambdakitotel.WrapStore(struct{ lambdakit.Store }{mem}).(lambdakit.BatchGetter); ok {
		t.Error("WrapStore(a Store without GetRecords) is a BatchGetter; want none, as the store is none")
	}
}

// Another owner takes the record over while the handler runs: the
// completion (or, after a handler error, the release) finds the lease lost.
// The store span says so, and the record fails as LeaseLost.
func TestLeaseLostIsRecorded(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// steal takes the record over as an owner whose clock is past the
	// first owner's lease would, with a lease token that starts, as an
	// engine's does, with when it took the key by its clock: that is how
	// the first owner's refused release tells a takeover from a key its
	// own release had freed.
	steal := func(ctx context.Context, key string) error {
		now := time.Now().Add(time.Hour)
		_, ok, err := store.Acquire(ctx, lambdakit.IdempotencyRecord{ID: recordID(key), Status: lambdakit.StatusInProgress,
			Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: fmt.Sprintf("%d.thief", now.UnixMilli())}, now)
		if err == nil && !ok {
			err = errors.New("could not take the record over")
		}
		return err
	}
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		var p payment
		if err := jsonUnmarshal(msg.Body, &p); err != nil {
			return nil, err
		}
		if err := steal(ctx, p.PaymentID); err != nil {
			return nil, err
		}
		if p.Fail {
			return nil, errDeclined
		}
		return nil, nil
	})
	sr, tp := recorder(t)
	logs := &lambdakittest.LogBuffer{}
	mComplete := lambdakittest.Message(body(t, payment{PaymentID: "pay_a", Amount: 1}))
	mRelease := lambdakittest.Message(body(t, payment{PaymentID: "pay_b", Amount: 1, Fail: true}))
	if _, err := traced(tp, store, h, logs)(invocation(t), lambdakittest.Event(mComplete, mRelease)); !errors.Is(err, lambdakit.ErrAllFailed) {
		t.Fatalf("batch: %v; want ErrAllFailed", err)
	}
	tr := tree(t, sr.Ended())
	for name, c := range map[string]struct {
		msg events.SQSMessage
		op  string
	}{"completion": {mComplete, "complete"}, "release": {mRelease, "release"}} {
		t.Run(name, func(t *testing.T) {
			spans := tr.store[c.msg.MessageId]
			want := []string{"acquire", c.op}
			if c.op == "release" {
				// A refused release reads the record's holder, to
				// tell a takeover from its own earlier delete.
				want = append(want, "get_records")
			}
			if got := storeOps(spans); !reflect.DeepEqual(got, want) {
				t.Fatalf("store spans %v; want %v", got, want)
			}
			lost := spans[1]
			for _, miss := range missingAttrs(lost, lambdakitotel.LeaseLostKey.Bool(true), semconv.ErrorTypeKey.String("LeaseLost")) {
				t.Errorf("%s span: %s", c.op, miss)
			}
			if lost.Status().Code != codes.Error {
				t.Errorf("%s span status %v; want error", c.op, lost.Status())
			}
			if _, ok := attr(spans[0], lambdakitotel.LeaseLostKey); ok || spans[0].Status().Code != codes.Unset {
				t.Errorf("acquire span marked lost or failed; want it clean")
			}
			rec := tr.records[c.msg.MessageId]
			if got := attrString(rec, lambdakitotel.ReasonKey); got != "LeaseLost" {
				t.Errorf("record reason %q; want LeaseLost", got)
			}
		})
	}
	agreeWithLogs(t, logs, tr)
}

// A store that fails every request: the store spans are errors of no known
// kind, the records fail as StoreError, and the invocation, every record
// failed, is an error too (ErrAllFailed).
func TestStoreErrorsAndAllFailed(t *testing.T) {
	store := &storetest.FaultyStore{Store: &lambdakittest.MemoryStore{}, Rate: 1, Seed: 7}
	sr, tp := recorder(t)
	logs := &lambdakittest.LogBuffer{}
	msgs := []events.SQSMessage{
		lambdakittest.Message(body(t, payment{PaymentID: "pay_x", Amount: 1})),
		lambdakittest.Message(body(t, payment{PaymentID: "pay_y", Amount: 1})),
	}
	_, err := traced(tp, store, charge, logs)(invocation(t), lambdakittest.Event(msgs...))
	if !errors.Is(err, lambdakit.ErrAllFailed) {
		t.Fatalf("batch: %v; want ErrAllFailed", err)
	}
	tr := tree(t, sr.Ended())
	if tr.root.Status().Code != codes.Error || attrString(tr.root, semconv.ErrorTypeKey) != "AllFailed" {
		t.Errorf("invocation status %v, error.type %q; want error, AllFailed", tr.root.Status(), attrString(tr.root, semconv.ErrorTypeKey))
	}
	if n := storeSpanCount(tr); n != store.Injected() {
		t.Errorf("%d store spans for %d store requests; want one each", n, store.Injected())
	}
	for _, m := range msgs {
		spans := tr.store[m.MessageId]
		if len(spans) == 0 || attrString(spans[0], lambdakitotel.StoreOperationKey) != "acquire" {
			t.Fatalf("message %s: store spans %v; want an acquire first", m.MessageId, storeOps(spans))
		}
		for _, s := range spans {
			if s.Status().Code != codes.Error || attrString(s, semconv.ErrorTypeKey) != "_OTHER" {
				t.Errorf("%s span: status %v, error.type %q; want error, _OTHER", s.Name(), s.Status(), attrString(s, semconv.ErrorTypeKey))
			}
			if len(s.Events()) == 0 || s.Events()[0].Name != "exception" {
				t.Errorf("%s span: events %v; want the error recorded", s.Name(), s.Events())
			}
		}
		if got := attrString(tr.records[m.MessageId], lambdakitotel.ReasonKey); got != "StoreError" {
			t.Errorf("message %s: reason %q; want StoreError", m.MessageId, got)
		}
	}
	agreeWithLogs(t, logs, tr)
}

func storeSpanCount(tr spanTree) int {
	n := 0
	for _, spans := range tr.store {
		n += len(spans)
	}
	return n
}

// A handler that panics (no Idempotent to catch it): its record span still
// ends, as a failure, and the batch's log line keeps the panic's own stack.
func TestPanicEndsTheRecordSpan(t *testing.T) {
	sr, tp := recorder(t)
	logs := &lambdakittest.LogBuffer{}
	batch := lambdakitotel.WrapBatch(lambdakit.Batch(
		lambdakitotel.Middleware(withProvider(tp))(lambdakit.HandlerFunc(panickingHandler)),
		func(o *lambdakit.BatchOptions) {
			o.Logger = logs.Logger()
			o.DisableMetrics = true
			o.AllowAllFailed = true
		},
	), withProvider(tp))
	m := lambdakittest.Message(`{}`)
	resp, err := batch(invocation(t), lambdakittest.Event(m))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("batch: %v, %d failures; want the record failed", err, len(resp.BatchItemFailures))
	}
	tr := tree(t, sr.Ended())
	s, ok := tr.records[m.MessageId]
	if !ok {
		t.Fatal("no record span ended")
	}
	if s.Status().Code != codes.Error || attrString(s, lambdakitotel.OutcomeKey) != "failed" || attrString(s, lambdakitotel.ReasonKey) != "HandlerError" {
		t.Errorf("record span: status %v, outcome %q, reason %q; want error, failed, HandlerError",
			s.Status(), attrString(s, lambdakitotel.OutcomeKey), attrString(s, lambdakitotel.ReasonKey))
	}
	agreeWithLogs(t, logs, tr)
	for _, line := range logs.Lines(t) {
		if line["msg"] == "message failed" {
			if stack, _ := line["stack"].(string); !strings.Contains(stack, "panickingHandler") {
				t.Errorf("logged stack does not reach the panicking handler:\n%s", stack)
			}
		}
	}
}

func panickingHandler(context.Context, *events.SQSMessage) ([]byte, error) {
	panic("card reader on fire")
}

// The sender's X-Ray header, which SQS hands over as the AWSTraceHeader
// system attribute, becomes a link on the record span and on the
// invocation span; a malformed header gives none.
func TestSenderLinks(t *testing.T) {
	withHeader := func(h string) func(*events.SQSMessage) {
		return func(m *events.SQSMessage) { m.Attributes["AWSTraceHeader"] = h }
	}
	good := lambdakittest.Message(`{}`, withHeader("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"))
	unsampled := lambdakittest.Message(`{}`, withHeader("Parent=0123456789abcdef;Root=1-00000001-000000000000000000000002;Sampled=0;Lineage=a:1"))
	bad := []events.SQSMessage{lambdakittest.Message(`{}`)}
	for _, h := range []string{
		"Root=1-5759e988-bd862e3fe1be46a994272793",                         // no parent
		"Parent=53995c3f42cd8ad8;Sampled=1",                                // no root
		"Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", // unknown version
		"Root=1-5759e988bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",  // no dash after the time
		"Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8", // not hex
		"Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8", // zero trace ID
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", // zero span ID
		"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad",  // short span ID
		"garbage",
	} {
		bad = append(bad, lambdakittest.Message(`{}`, withHeader(h)))
	}
	sr, tp := recorder(t)
	ok := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil })
	batch := lambdakitotel.WrapBatch(lambdakit.Batch(lambdakitotel.Middleware(withProvider(tp))(ok),
		func(o *lambdakit.BatchOptions) {
			o.Logger = (&lambdakittest.LogBuffer{}).Logger()
			o.DisableMetrics = true
		},
	), withProvider(tp))
	if _, err := batch(invocation(t), lambdakittest.Event(append([]events.SQSMessage{good, unsampled}, bad...)...)); err != nil {
		t.Fatal(err)
	}
	tr := tree(t, sr.Ended())
	check := func(t *testing.T, links []sdktrace.Link, traceID, spanID string, sampled bool) {
		t.Helper()
		if len(links) != 1 {
			t.Fatalf("%d links; want 1", len(links))
		}
		sc := links[0].SpanContext
		if sc.TraceID().String() != traceID || sc.SpanID().String() != spanID || sc.IsSampled() != sampled || !sc.IsRemote() {
			t.Errorf("link to %s/%s sampled=%v remote=%v; want %s/%s sampled=%v remote", sc.TraceID(), sc.SpanID(),
				sc.IsSampled(), sc.IsRemote(), traceID, spanID, sampled)
		}
	}
	t.Run("record with a header", func(t *testing.T) {
		check(t, tr.records[good.MessageId].Links(), "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", true)
		check(t, tr.records[unsampled.MessageId].Links(), "00000001000000000000000000000002", "0123456789abcdef", false)
	})
	t.Run("records without a valid header", func(t *testing.T) {
		for _, m := range bad {
			if n := len(tr.records[m.MessageId].Links()); n != 0 {
				t.Errorf("header %q: %d links; want none", m.Attributes["AWSTraceHeader"], n)
			}
		}
	})
	t.Run("invocation", func(t *testing.T) {
		if n := len(tr.root.Links()); n != 2 {
			t.Errorf("%d links; want 2, one per valid header", n)
		}
	})
}

// WrapBatch flushes the provider before it returns, so that spans held by
// a batching processor are exported before Lambda freezes the process.
func TestFlushBeforeReturning(t *testing.T) {
	run := func(t *testing.T, optFns ...func(*lambdakitotel.Options)) int {
		exp := tracetest.NewInMemoryExporter()
		// A batcher that would hold spans for an hour unless flushed.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		batch := lambdakitotel.WrapBatch(lambdakit.Batch(lambdakitotel.Middleware(withProvider(tp))(charge),
			func(o *lambdakit.BatchOptions) {
				o.Logger = (&lambdakittest.LogBuffer{}).Logger()
				o.DisableMetrics = true
			},
		), append([]func(*lambdakitotel.Options){withProvider(tp)}, optFns...)...)
		if _, err := batch(invocation(t), lambdakittest.Event(lambdakittest.Message(body(t, payment{PaymentID: "p", Amount: 1})))); err != nil {
			t.Fatal(err)
		}
		return len(exp.GetSpans())
	}
	t.Run("flushed", func(t *testing.T) {
		if n := run(t); n != 2 {
			t.Errorf("%d spans exported on return; want 2", n)
		}
	})
	t.Run("not flushed with DisableFlush", func(t *testing.T) {
		if n := run(t, func(o *lambdakitotel.Options) { o.DisableFlush = true }); n != 0 {
			t.Errorf("%d spans exported on return; want 0", n)
		}
	})
}

// The flush is bounded by FlushTimeout, and by half the time left before
// the invocation deadline.
func TestFlushIsBounded(t *testing.T) {
	_, tp := recorder(t)
	for name, c := range map[string]struct {
		timeout, left time.Duration
		most          time.Duration
	}{
		"by FlushTimeout":    {timeout: 200 * time.Millisecond, left: time.Minute, most: 200 * time.Millisecond},
		"by the deadline":    {timeout: time.Minute, left: 10 * time.Second, most: 5 * time.Second},
		"default one second": {timeout: 0, left: time.Minute, most: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			var got time.Duration
			flushes := 0
			batch := lambdakitotel.WrapBatch(func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
				return events.SQSEventResponse{}, nil
			}, withProvider(tp), func(o *lambdakitotel.Options) {
				o.FlushTimeout = c.timeout
				o.Flush = func(ctx context.Context) error {
					flushes++
					d, ok := ctx.Deadline()
					if !ok {
						t.Error("flush without a deadline")
					}
					got = time.Until(d)
					return nil
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), c.left)
			defer cancel()
			if _, err := batch(ctx, lambdakittest.Event(lambdakittest.Message(`{}`))); err != nil {
				t.Fatal(err)
			}
			if flushes != 1 || got <= 0 || got > c.most {
				t.Errorf("%d flushes with %v left; want 1 with at most %v", flushes, got, c.most)
			}
		})
	}
}

// Without a TracerProvider the wrappers use the global one.
func TestDefaultsToTheGlobalProvider(t *testing.T) {
	sr, tp := recorder(t)
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(old) })
	store := &lambdakittest.MemoryStore{}
	idem := lambdakit.Idempotent(lambdakitotel.WrapStore(store), lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) {
			o.Prefix = prefix
			o.Logger = (&lambdakittest.LogBuffer{}).Logger()
		})
	batch := lambdakitotel.WrapBatch(lambdakit.Batch(lambdakit.Chain(charge, lambdakitotel.Middleware(), idem),
		func(o *lambdakit.BatchOptions) {
			o.Logger = (&lambdakittest.LogBuffer{}).Logger()
			o.DisableMetrics = true
		}))
	if _, err := batch(invocation(t), lambdakittest.Event(lambdakittest.Message(body(t, payment{PaymentID: "g", Amount: 1})))); err != nil {
		t.Fatal(err)
	}
	if n := len(sr.Ended()); n != 4 {
		t.Errorf("%d spans through the global provider; want 4 (invocation, record, acquire, complete)", n)
	}
}

// The wrapped store keeps the store contract, and makes one span per
// request that reached the store.
func TestWrappedStoreKeepsTheContract(t *testing.T) {
	sr, tp := recorder(t)
	var mems []*lambdakittest.MemoryStore
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store {
		mem := &lambdakittest.MemoryStore{}
		mems = append(mems, mem)
		return lambdakitotel.WrapStore(mem, withProvider(tp))
	})
	calls := 0
	for _, m := range mems {
		calls += m.Calls().Total()
	}
	if spans := len(sr.Ended()); calls == 0 || spans < calls {
		t.Errorf("%d store spans for %d store requests; want at least one each", spans, calls)
	}
}

// The crash checks pass through the wrapped store as on the store itself:
// lambdakittest.CrashStore over it finds the effect marker below the
// wrapper, so a crash after EffectDone leaves a record kept for good.
func TestWrappedStoreKeepsTheCrashChecks(t *testing.T) {
	_, tp := recorder(t)
	storetest.RunCrashChecks(t, func(*testing.T) lambdakit.Store {
		return lambdakitotel.WrapStore(&lambdakittest.MemoryStore{}, withProvider(tp))
	})
}

// The span's reason is the batch log line's, whatever the error: both take
// it from lambdakit.ReasonOf. A permanent failure (without a dead-letter
// sender, so it fails as usual) and a permanent failure joined with a lost
// lease are where a second classifier would drift.
func TestSpanReasonIsTheLogLinesReason(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	sr, tp := recorder(t)
	logs := &lambdakittest.LogBuffer{}
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		var p payment
		if err := jsonUnmarshal(msg.Body, &p); err != nil {
			return nil, err
		}
		switch p.PaymentID {
		case "pay_permanent":
			return nil, lambdakit.Permanent(errDeclined)
		case "pay_permanent_lost":
			return nil, lambdakit.Permanent(fmt.Errorf("%w: %w", errDeclined, lambdakit.ErrLeaseLost))
		}
		return nil, errDeclined
	})
	msgs := []events.SQSMessage{
		lambdakittest.Message(body(t, payment{PaymentID: "pay_permanent", Amount: 1})),
		lambdakittest.Message(body(t, payment{PaymentID: "pay_permanent_lost", Amount: 1})),
		lambdakittest.Message(body(t, payment{PaymentID: "pay_plain", Amount: 1})),
	}
	if _, err := traced(tp, store, h, logs)(invocation(t), lambdakittest.Event(msgs...)); !errors.Is(err, lambdakit.ErrAllFailed) {
		t.Fatalf("batch: %v; want ErrAllFailed", err)
	}
	tr := tree(t, sr.Ended())
	for i, want := range []string{"Permanent", "Permanent", "HandlerError"} {
		if got := attrString(tr.records[msgs[i].MessageId], lambdakitotel.ReasonKey); got != want {
			t.Errorf("message %d: span reason %q; want %q", i, got, want)
		}
	}
	agreeWithLogs(t, logs, tr)
}

// storeSpanNames lists the names of the ended spans.
func storeSpanNames(sr *tracetest.SpanRecorder) []string {
	var names []string
	for _, s := range sr.Ended() {
		names = append(names, s.Name())
	}
	return names
}

// Through WrapStore, a dynamostore keeps what the engine finds on it
// beyond the Store: the handler's item is written, what it stages is
// checked against DynamoDB's limits before its work, and StagedOnly and
// StoreEffect start, with their requests traced.
func TestWrapStoreKeepsTheCapabilitiesOfADynamoStore(t *testing.T) {
	ep := dynamostoretest.Start(t)
	table := ep.NewTable(t)
	ddb, err := dynamostore.New(ep.Client(), table)
	if err != nil {
		t.Fatal(err)
	}
	// once is an engine on the traced ddb, with its spans in the returned
	// recorder.
	once := func(t *testing.T, optFns ...func(*lambdakit.Options)) (*lambdakit.Once, *tracetest.SpanRecorder) {
		sr, tp := recorder(t)
		optFns = append([]func(*lambdakit.Options){func(o *lambdakit.Options) {
			o.Prefix, o.Logger = prefix, (&lambdakittest.LogBuffer{}).Logger()
		}}, optFns...)
		return lambdakit.NewOnce(lambdakitotel.WrapStore(ddb, withProvider(tp)), optFns...), sr
	}

	t.Run("SetItem", func(t *testing.T) {
		e, _ := once(t)
		if _, err := e.Do(t.Context(), "item-1", nil, func(ctx context.Context) ([]byte, error) {
			return nil, dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "5"}})
		}); err != nil {
			t.Fatal(err)
		}
		out, err := ep.Client().GetItem(t.Context(), &dynamodb.GetItemInput{
			TableName:      aws.String(table),
			Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: recordID("item-1")}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := out.Item["amount"].(*types.AttributeValueMemberN); n == nil || n.Value != "5" {
			t.Errorf("record's item %v; want the handler's amount 5 on it", out.Item)
		}
	})

	t.Run("StagedTooLarge", func(t *testing.T) {
		e, _ := once(t)
		effects := 0
		// With the record's own, one write more than a DynamoDB
		// transaction holds.
		var writes []types.TransactWriteItem
		for i := range 100 {
			writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("row#%d", i)},
			}}})
		}
		var stageErr error
		_, err := e.Do(t.Context(), "staged-1", nil, func(ctx context.Context) ([]byte, error) {
			if stageErr = dynamostore.Stage(ctx, writes...); stageErr != nil {
				return nil, stageErr
			}
			effects++ // the charge, which must not happen when its write cannot land
			return nil, nil
		})
		if !errors.Is(stageErr, lambdakit.ErrStagedTooLarge) {
			t.Errorf("Stage: got %v; want ErrStagedTooLarge, before the work", stageErr)
		}
		if errors.Is(err, lambdakit.ErrCompletionRejected) || effects != 0 {
			t.Errorf("Do: got %v after %d effects; want the record refused before its effect, not its completion after it", err, effects)
		}
		recs, err := ddb.GetRecords(t.Context(), []string{recordID("staged-1")})
		if err != nil {
			t.Fatal(err)
		}
		if rec, ok := recs[recordID("staged-1")]; ok {
			t.Errorf("record left %s (failure %q); want it released", rec.Status, rec.Failure)
		}
	})

	for _, mode := range []struct {
		name, span string
		opt        func(*lambdakit.Options)
	}{
		{"StagedOnly", "lambdakit.store.commit", func(o *lambdakit.Options) { o.StagedOnly = true }},
		{"StoreEffect", "lambdakit.store.mark_effect", func(o *lambdakit.Options) { o.StoreEffect = true }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			var e *lambdakit.Once
			var sr *tracetest.SpanRecorder
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("NewOnce panicked: %v; want the wrapped store's capability found", r)
					}
				}()
				e, sr = once(t, mode.opt)
			}()
			got, err := e.Do(t.Context(), "mode-"+mode.name, nil, func(ctx context.Context) ([]byte, error) {
				lambdakit.EffectDone(ctx, "charged")
				return []byte(`"done"`), nil
			})
			if err != nil || string(got) != `"done"` {
				t.Fatalf("Do: got %s, %v", got, err)
			}
			recs, err := ddb.GetRecords(t.Context(), []string{recordID("mode-" + mode.name)})
			if err != nil {
				t.Fatal(err)
			}
			if rec := recs[recordID("mode-"+mode.name)]; rec.Status != lambdakit.StatusCompleted {
				t.Errorf("record %+v; want it completed", rec)
			}
			if names := storeSpanNames(sr); !slices.Contains(names, mode.span) {
				t.Errorf("spans %v; want a %s span", names, mode.span)
			}
		})
	}
}

// With ReadableIDs the record's ID holds the key itself (an email, a
// customer's name): the store spans still name the record by the prefix
// and a SHA-256 of the key, the ID it would have without ReadableIDs, so
// that no key reaches the traces, and the store gets the readable ID.
func TestStoreSpansNeverCarryAReadableKey(t *testing.T) {
	const key = "alice@example.com"
	sr, tp := recorder(t)
	mem := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(lambdakitotel.WrapStore(mem, withProvider(tp)), func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.Logger = prefix, true, (&lambdakittest.LogBuffer{}).Logger()
	})
	for range 2 { // the first runs the work, the second is a duplicate
		if _, err := e.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { return []byte(`"done"`), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := mem.Records()[prefix+"#"+key]; !ok {
		t.Fatalf("no record under the readable ID %q", prefix+"#"+key)
	}
	spans := sr.Ended()
	if len(spans) == 0 {
		t.Fatal("no store spans")
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), key) {
				t.Errorf("%s span: attribute %s=%q carries the key", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
		if got := attrString(s, lambdakitotel.RecordIDKey); got != recordID(key) {
			t.Errorf("%s span: record ID %q; want %q", s.Name(), got, recordID(key))
		}
	}
}

// A readable key that itself ends in '#' and a SHA-256, as a hashed ID
// does, is still a key: the engine tells the wrapper its IDs hold keys, so
// the spans carry the hashed ID, not the key, as for any other key.
func TestStoreSpansHashAReadableKeyThatLooksHashed(t *testing.T) {
	key := "alice@example.com#" + strings.Repeat("ab", 32)
	sr, tp := recorder(t)
	e := lambdakit.NewOnce(lambdakitotel.WrapStore(&lambdakittest.MemoryStore{}, withProvider(tp)), func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.Logger = prefix, true, (&lambdakittest.LogBuffer{}).Logger()
	})
	if _, err := e.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	spans := sr.Ended()
	if len(spans) == 0 {
		t.Fatal("no store spans")
	}
	for _, s := range spans {
		if got := attrString(s, lambdakitotel.RecordIDKey); got != recordID(key) {
			t.Errorf("%s span: record ID %q; want %q, the key hashed", s.Name(), got, recordID(key))
		}
	}
}

// acquireFailsStore fails every Acquire with an error that names the
// record by its stored ID, as dynamostore's errors do.
type acquireFailsStore struct{ *lambdakittest.MemoryStore }

func (acquireFailsStore) Acquire(_ context.Context, rec lambdakit.IdempotencyRecord, _ time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("teststore: acquire %s: throttled", rec.ID)
}

// quotingAcquireStore fails every Acquire with a text that quotes the
// record's stored ID (%q), escaping the key's quotes and backslashes.
type quotingAcquireStore struct{ *lambdakittest.MemoryStore }

func (quotingAcquireStore) Acquire(_ context.Context, rec lambdakit.IdempotencyRecord, _ time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("teststore: acquire %q: throttled", rec.ID)
}

// A store's error may quote the stored ID, escaping some of the key's
// characters: the failed span's status and exception event still name the
// record by its hashed ID, not the key.
func TestStoreSpansNeverCarryAQuotedReadableKeyInAnError(t *testing.T) {
	const key = `bob "the boss" \ smith`
	for _, s := range failedStoreSpans(t, quotingAcquireStore{&lambdakittest.MemoryStore{}}, key) {
		texts := []string{s.Status().Description}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, text := range texts {
			if strings.Contains(text, "the boss") {
				t.Errorf("%s span: %q carries the key", s.Name(), text)
			}
		}
		if !strings.Contains(s.Status().Description, recordID(key)) {
			t.Errorf("%s span: status %q; want the record named by %s", s.Name(), s.Status().Description, recordID(key))
		}
	}
}

// failedStoreSpans runs one call of key through store, made idempotent
// with ReadableIDs and traced, which must fail, and returns its failed
// store spans: at least one.
func failedStoreSpans(t *testing.T, store lambdakit.Store, key string) []sdktrace.ReadOnlySpan {
	t.Helper()
	sr, tp := recorder(t)
	e := lambdakit.NewOnce(lambdakitotel.WrapStore(store, withProvider(tp)), func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.Logger = prefix, true, (&lambdakittest.LogBuffer{}).Logger()
	})
	if _, err := e.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { return nil, nil }); err == nil {
		t.Fatal("Do succeeded; want the store's failure")
	}
	var failed []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Status().Code == codes.Error {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		t.Fatal("no failed store span")
	}
	return failed
}

// With ReadableIDs a store's error names the record by its stored ID,
// which holds the key: the failed span's status and exception event name
// it by the hashed ID instead, as its record_id does.
func TestStoreSpansNeverCarryAReadableKeyInAnError(t *testing.T) {
	const key = "alice@example.com"
	for _, s := range failedStoreSpans(t, acquireFailsStore{&lambdakittest.MemoryStore{}}, key) {
		if d := s.Status().Description; strings.Contains(d, key) || !strings.Contains(d, "teststore") || !strings.Contains(d, recordID(key)) {
			t.Errorf("%s span: status %q; want the store's text naming the record by %s, not the key", s.Name(), d, recordID(key))
		}
		if len(s.Events()) == 0 {
			t.Errorf("%s span: no exception event", s.Name())
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), key) {
					t.Errorf("%s span: event %s: attribute %s=%q carries the key", s.Name(), ev.Name, kv.Key, kv.Value.Emit())
				}
			}
		}
	}
}
