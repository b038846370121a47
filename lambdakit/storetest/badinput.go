package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// BadInputTarget is what RunBadInput runs on: a Store, a way to look at
// what it holds, and what it cannot keep.
type BadInputTarget struct {
	// Store is the store under test, empty.
	Store lambdakit.Store
	// Statuses returns the status of every record the store holds, by ID.
	Statuses func(t *testing.T) map[string]lambdakit.IdempotencyStatus
	// MaxResult is the largest result the store keeps with a record, in
	// bytes; 0 means any size.
	MaxResult int
	// TextResultsOnly says the store keeps only results that are UTF-8.
	TextResultsOnly bool
}

// RunBadInput runs Batch and Idempotent (the key is the body's "id" field,
// the payload the whole body) over a store, on bad input of every kind the
// bad-input table of docs/batch-processing.md lists, one subtest per row. Each batch carries
// the bad record beside a good one. Each subtest checks the bad record's
// outcome and the reason logged for it, that the good record succeeded and
// its handler ran once, that nothing panicked, and that the store holds no
// record in progress once the batch has answered. newTarget is called once
// per subtest.
func RunBadInput(t *testing.T, newTarget func(t *testing.T) BadInputTarget) {
	for _, row := range badInputRows {
		t.Run(row.name, func(t *testing.T) {
			row.run(t, newBadRun(t, newTarget(t)))
		})
	}
}

// badRun is one batch handler over a target, with what it saw.
type badRun struct {
	target BadInputTarget
	logs   lambdakittest.LogBuffer
	mu     sync.Mutex
	runs   map[string]int               // handler runs by the decoded "id"
	errs   map[*events.SQSMessage]error // what the middleware returned
	seen   map[*events.SQSMessage]bool  // records the middleware returned for
	opts   []func(*lambdakit.Options)
	inner  lambdakit.Handler // nil: the default handler
	event  events.SQSEvent   // the last batch run
	resp   events.SQSEventResponse
	err    error
	result map[string][]byte // the middleware's result by message ID
}

func newBadRun(t *testing.T, target BadInputTarget) *badRun {
	if target.Store == nil || target.Statuses == nil {
		t.Fatal("lambdakittest: BadInputTarget needs Store and Statuses")
	}
	return &badRun{target: target, runs: map[string]int{}}
}

// badPayload is what the default handler reads from a body.
type badPayload struct {
	ID         any `json:"id"`
	N          int `json:"n"`
	ResultSize int `json:"result_size"` // answer with a string of this many bytes
}

func (r *badRun) count(id any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[fmt.Sprint(id)]++
}

func (r *badRun) ran(id any) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[fmt.Sprint(id)]
}

// batch runs event through Batch and Idempotent over the target, checks
// what must hold after every batch, and returns the response and error.
func (r *badRun) batch(t *testing.T, event events.SQSEvent) (events.SQSEventResponse, error) {
	t.Helper()
	inner := r.inner
	if inner == nil {
		inner = lambdakit.TypedResult(func(ctx context.Context, p badPayload) (string, error) {
			r.count(p.ID)
			if p.ResultSize > 0 {
				return strings.Repeat("x", p.ResultSize), nil
			}
			return fmt.Sprintf("done %v", p.ID), nil
		})
	}
	r.errs, r.seen, r.result = map[*events.SQSMessage]error{}, map[*events.SQSMessage]bool{}, map[string][]byte{}
	watch := lambdakit.Middleware(func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			out, err := next.Handle(ctx, msg)
			r.mu.Lock()
			r.errs[msg], r.seen[msg] = err, true
			if err == nil {
				r.result[msg.MessageId] = out
			}
			r.mu.Unlock()
			return out, err
		})
	})
	opts := append([]func(*lambdakit.Options){func(o *lambdakit.Options) {
		o.Prefix = "badinput"
		o.Logger = r.logs.Logger()
	}}, r.opts...)
	idem := lambdakit.Idempotent(r.target.Store, lambdakit.KeyFromField("id"), opts...)
	b := lambdakit.Batch(lambdakit.Chain(inner, watch, idem), func(o *lambdakit.BatchOptions) { o.Logger = r.logs.Logger() })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r.event = event
	r.resp, r.err = b(ctx, event)
	r.checkAfter(t)
	return r.resp, r.err
}

// checkAfter checks what must hold after every batch: no panic, no record
// left in progress, every record ID short enough for any store's key.
func (r *badRun) checkAfter(t *testing.T) {
	t.Helper()
	for msg, err := range r.errs {
		if pe := (*lambdakit.PanicError)(nil); errors.As(err, &pe) {
			t.Errorf("record %s: got a panic, %s; want none", msg.MessageId, clipped(err))
		}
	}
	for id, status := range r.target.Statuses(t) {
		if status != lambdakit.StatusCompleted {
			t.Errorf("record %s is %s after the batch answered; want no lock left behind", id, status)
		}
		// DynamoDB's partition keys hold at most 2,048 bytes.
		if len(id) > 2048 {
			t.Errorf("record ID of %d bytes; want at most 2,048", len(id))
		}
	}
}

// record returns record i of the last event.
func (r *badRun) record(t *testing.T, i int) *events.SQSMessage {
	t.Helper()
	if i >= len(r.event.Records) {
		t.Fatalf("no record %d", i)
	}
	return &r.event.Records[i]
}

// failed checks that record i failed with an error that is want and that
// its log line's reason says reason, and that the batch reported it.
func (r *badRun) failed(t *testing.T, i int, want error, reason string) {
	t.Helper()
	msg := r.record(t, i)
	r.mu.Lock()
	err, seen := r.errs[msg], r.seen[msg]
	r.mu.Unlock()
	if !seen || !errors.Is(err, want) {
		t.Errorf("record %d: got %s (returned %t); want %v", i, clipped(err), seen, want)
	}
	if !r.reported(msg.MessageId) {
		t.Errorf("record %d (%s): not in batchItemFailures %+v; want it reported", i, msg.MessageId, r.resp.BatchItemFailures)
	}
	lines := r.lines(t, msg.MessageId, "message failed")
	if len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["reason"]), reason) {
		t.Errorf("record %d: got %d failure lines, the first %.300v; want one whose reason says %q", i, len(lines), lines, reason)
	}
}

// succeeded checks that record i succeeded and was not reported.
func (r *badRun) succeeded(t *testing.T, i int) {
	t.Helper()
	msg := r.record(t, i)
	r.mu.Lock()
	err, seen := r.errs[msg], r.seen[msg]
	r.mu.Unlock()
	if !seen || err != nil {
		t.Errorf("record %d: got %s (returned %t); want success", i, clipped(err), seen)
	}
	if msg.MessageId != "" && r.reported(msg.MessageId) && !r.twinFailed(msg) {
		t.Errorf("record %d (%s): reported failed; want success", i, msg.MessageId)
	}
}

// twinFailed reports whether another record with msg's message ID failed:
// the ID is then reported, and SQS gives both back.
func (r *badRun) twinFailed(msg *events.SQSMessage) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.event.Records {
		other := &r.event.Records[i]
		if other != msg && other.MessageId == msg.MessageId && (r.errs[other] != nil || !r.seen[other]) {
			return true
		}
	}
	return false
}

func (r *badRun) reported(id string) bool {
	for _, f := range r.resp.BatchItemFailures {
		if f.ItemIdentifier == id {
			return true
		}
	}
	return false
}

func (r *badRun) lines(t *testing.T, messageID, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range r.logs.Lines(t) {
		if l["messageId"] == messageID && l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// good returns a good record for row, whose handler must run once.
func good(row string) events.SQSMessage {
	return lambdakittest.Message(fmt.Sprintf(`{"id":"good-%s","n":1}`, row))
}

// alone checks that the good record (the last of the event) succeeded and
// ran once, and that the batch returned no error.
func (r *badRun) alone(t *testing.T, row string) {
	t.Helper()
	r.succeeded(t, len(r.event.Records)-1)
	if n := r.ran("good-" + row); n != 1 {
		t.Errorf("the good record's handler ran %d times; want 1", n)
	}
	if r.err != nil {
		t.Errorf("batch error %v; want none: the good record succeeded", r.err)
	}
}

// failsAlone is the common row: body fails with want and reason, the good
// record beside it succeeds.
func failsAlone(body string, want error, reason string) func(*testing.T, *badRun) {
	return func(t *testing.T, r *badRun) {
		row := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
		r.batch(t, lambdakittest.Event(lambdakittest.Message(body), good(row)))
		r.failed(t, 0, want, reason)
		r.alone(t, row)
	}
}

// deep returns a body whose "x" nests arrays so that the whole document is
// depth levels deep.
func deep(id string, depth int) string {
	return fmt.Sprintf(`{"id":%q,"x":%s%s}`, id, strings.Repeat("[", depth-1), strings.Repeat("]", depth-1))
}

// padded returns a body of exactly size bytes, a key and a long field.
func padded(id string, size int) string {
	head := fmt.Sprintf(`{"id":%q,"pad":"`, id)
	return head + strings.Repeat("p", size-len(head)-2) + `"}`
}

type badRow struct {
	name string
	run  func(*testing.T, *badRun)
}

// The rows of the bad-input table of docs/batch-processing.md, in its order.
var badInputRows = []badRow{
	{"body_not_JSON", failsAlone(`id=1&n=2`, lambdakit.ErrInvalidKey, "idempotency key cannot be read safely: body is not valid JSON")},
	{"body_JSON_but_not_an_object", failsAlone(`["id","x"]`, lambdakit.ErrInvalidKey, "the body or a parent is not an object")},
	{"non-UTF-8_bytes_outside_a_string", failsAlone("{\"id\":\"u\"}\xff", lambdakit.ErrInvalidKey, "body is not valid JSON")},
	{"key_of_the_wrong_type", failsAlone(`{"id":{"v":1}}`, lambdakit.ErrInvalidKey, "value is an object or array, not a scalar")},
	{"key_named_twice_in_other_case", failsAlone(`{"id":"a","ID":"b"}`, lambdakit.ErrInvalidKey, "the field is named more than once, or again in other case")},
	{"key_named_twice", failsAlone(`{"id":"a","id":null}`, lambdakit.ErrInvalidKey, "the field is named more than once, or again in other case")},
	{"field_of_the_wrong_type", func(t *testing.T, r *badRun) {
		failsAlone(`{"id":"wrong-type","n":"seven"}`, lambdakit.ErrDecode, "cannot decode message body")(t, r)
		// The lock was taken, then released: the retry can run at once.
		if n := len(r.target.Statuses(t)); n != 1 {
			t.Errorf("got %d records; want only the good record's", n)
		}
	}},
	{"key_missing", failsAlone(`{"n":1}`, lambdakit.ErrNoKey, `no idempotency key in message: field "id" missing or null`)},
	{"key_null", failsAlone(`{"id":null}`, lambdakit.ErrNoKey, `field "id" missing or null`)},
	{"key_empty", failsAlone(`{"id":""}`, lambdakit.ErrNoKey, `field "id" is empty`)},
	{"key_missing_with_ProcessWithoutKey", func(t *testing.T, r *badRun) {
		r.opts = append(r.opts, func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
		r.batch(t, lambdakittest.Event(lambdakittest.Message(`{"n":1}`), good("key_missing_with_ProcessWithoutKey")))
		r.succeeded(t, 0)
		r.alone(t, "key_missing_with_ProcessWithoutKey")
		if n := r.ran(nil); n != 1 {
			t.Errorf("the keyless record's handler ran %d times; want 1, without idempotency", n)
		}
		if n := len(r.target.Statuses(t)); n != 1 {
			t.Errorf("got %d records; want only the good record's", n)
		}
	}},
	{"body_not_JSON_with_ProcessWithoutKey", func(t *testing.T, r *badRun) {
		r.opts = append(r.opts, func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
		failsAlone(`id=1&n=2`, lambdakit.ErrInvalidKey, "body is not valid JSON")(t, r)
	}},
	{"number_key_spelled_two_ways", func(t *testing.T, r *badRun) {
		r.batch(t, lambdakittest.Event(lambdakittest.Message(`{"id":15,"n":1}`), lambdakittest.Message(`{"id":1.5e1,"n":1}`), good("number_key_spelled_two_ways")))
		r.succeeded(t, 0)
		r.succeeded(t, 1)
		r.alone(t, "number_key_spelled_two_ways")
		if n := r.ran(15); n != 1 {
			t.Errorf("the handler ran %d times for 15 and 1.5e1; want 1: one key, one payload", n)
		}
	}},
	{"body_near_256_KiB", bigBody(256 << 10)},
	{"body_near_1_MiB", bigBody(1 << 20)},
	{"JSON_nested_10000_deep", func(t *testing.T, r *badRun) {
		r.batch(t, lambdakittest.Event(lambdakittest.Message(deep("deep", 10000)), good("JSON_nested_10000_deep")))
		r.succeeded(t, 0)
		r.alone(t, "JSON_nested_10000_deep")
	}},
	{"JSON_nested_10001_deep", failsAlone(deep("deeper", 10001), lambdakit.ErrInvalidKey, "body is not valid JSON")},
	{"key_longer_than_DynamoDB_allows", func(t *testing.T, r *badRun) {
		long := strings.Repeat("k", 300<<10) // DynamoDB's partition key: 2,048 bytes
		r.batch(t, lambdakittest.Event(lambdakittest.Message(fmt.Sprintf(`{"id":%q}`, long)), good("key_longer_than_DynamoDB_allows")))
		r.succeeded(t, 0)
		r.alone(t, "key_longer_than_DynamoDB_allows")
		// A second batch: the long key is recognised.
		r.batch(t, lambdakittest.Event(lambdakittest.Message(fmt.Sprintf(`{"id":%q}`, long))))
		r.succeeded(t, 0)
		if n := r.ran(long); n != 1 {
			t.Errorf("the handler ran %d times for the long key; want 1", n)
		}
	}},
	{"non-UTF-8_bytes_in_a_string", func(t *testing.T, r *badRun) {
		r.batch(t, lambdakittest.Event(lambdakittest.Message("{\"id\":\"utf-\xff\",\"n\":1}"), good("non-UTF-8_bytes_in_a_string")))
		r.succeeded(t, 0)
		r.alone(t, "non-UTF-8_bytes_in_a_string")
		if n := r.ran("utf-\ufffd"); n != 1 {
			t.Errorf("the handler ran %d times for id \"utf-\\ufffd\"; want 1", n)
		}
	}},
	{"non-UTF-8_bytes_in_the_event_JSON", func(t *testing.T, r *badRun) {
		// Lambda's Go runtime decodes the event with encoding/json, which
		// turns each invalid byte into U+FFFD: both bodies say "x\ufffd".
		raw := "{\"Records\":[{\"messageId\":\"m1\",\"body\":\"{\\\"id\\\":\\\"x\xff\\\"}\"}," +
			"{\"messageId\":\"m2\",\"body\":\"{\\\"id\\\":\\\"x\xfe\\\"}\"}]}"
		var event events.SQSEvent
		if err := json.Unmarshal([]byte(raw), &event); err != nil {
			t.Fatal(err)
		}
		r.batch(t, event)
		r.succeeded(t, 0)
		r.succeeded(t, 1)
		if n := r.ran("x\ufffd"); n != 1 {
			t.Errorf("the handler ran %d times; want 1, the second body being the same payment", n)
		}
	}},
	{"event_with_no_records", func(t *testing.T, r *badRun) {
		resp, err := r.batch(t, events.SQSEvent{Records: []events.SQSMessage{}})
		if err != nil || resp.BatchItemFailures == nil || len(resp.BatchItemFailures) != 0 {
			t.Errorf("got %+v, %v; want an empty list of failures, no error", resp, err)
		}
	}},
	{"event_with_null_records", func(t *testing.T, r *badRun) {
		resp, err := r.batch(t, events.SQSEvent{Records: nil})
		if err != nil || resp.BatchItemFailures == nil || len(resp.BatchItemFailures) != 0 {
			t.Errorf("got %+v, %v; want an empty list of failures, no error", resp, err)
		}
	}},
	{"record_without_messageId_that_succeeds", func(t *testing.T, r *badRun) {
		noID := lambdakittest.Message(`{"id":"no-id-ok"}`)
		noID.MessageId = ""
		r.batch(t, lambdakittest.Event(noID, good("record_without_messageId_that_succeeds")))
		r.succeeded(t, 0)
		r.alone(t, "record_without_messageId_that_succeeds")
	}},
	{"record_without_messageId_that_fails", func(t *testing.T, r *badRun) {
		noID := lambdakittest.Message(`{"n":1}`)
		noID.MessageId = ""
		ok := good("record_without_messageId_that_fails")
		_, err := r.batch(t, lambdakittest.Event(noID, ok))
		missing := (*lambdakit.MissingMessageIDError)(nil)
		if !errors.As(err, &missing) || missing.Missing != 1 {
			t.Errorf("got %v; want a *MissingMessageIDError: the whole batch fails", err)
		}
		lines := r.lines(t, "", "message failed")
		if len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["reason"]), "no idempotency key") {
			t.Errorf("got %v; want one failure line for the record without messageId", lines)
		}
		r.succeeded(t, 1)
		// Lambda hands the whole batch back; the good record is then a
		// duplicate and its handler does not run again.
		r.batch(t, lambdakittest.Event(noID, lambdakittest.Redelivery(ok)))
		r.succeeded(t, 1)
		if n := r.ran("good-record_without_messageId_that_fails"); n != 1 {
			t.Errorf("the good record's handler ran %d times over the two batches; want 1", n)
		}
	}},
	{"two_records_with_one_messageId", func(t *testing.T, r *badRun) {
		a := lambdakittest.Message(`{"id":"same-id"}`)
		r.batch(t, lambdakittest.Event(a, a, good("two_records_with_one_messageId")))
		r.succeeded(t, 0)
		r.succeeded(t, 1)
		r.alone(t, "two_records_with_one_messageId")
		if n := r.ran("same-id"); n != 1 {
			t.Errorf("the handler ran %d times for one message delivered twice; want 1", n)
		}
	}},
	{"two_records_with_one_messageId_one_failing", func(t *testing.T, r *badRun) {
		a := lambdakittest.Message(`{"id":"twin"}`)
		b := a
		b.Body = `{"n":1}` // no key: fails
		r.batch(t, lambdakittest.Event(a, b, good("two_records_with_one_messageId_one_failing")))
		r.succeeded(t, 0)
		r.failed(t, 1, lambdakit.ErrNoKey, "no idempotency key")
		r.alone(t, "two_records_with_one_messageId_one_failing")
		if n := len(r.resp.BatchItemFailures); n != 1 {
			t.Errorf("got %d batchItemFailures; want the shared ID once", n)
		}
	}},
	{"result_larger_than_an_item_holds", func(t *testing.T, r *badRun) {
		const size = 450_000 // DynamoDB's items hold 400 KB
		msg := lambdakittest.Message(fmt.Sprintf(`{"id":"big-result","result_size":%d}`, size))
		r.batch(t, lambdakittest.Event(msg, good("result_larger_than_an_item_holds")))
		r.succeeded(t, 0)
		r.alone(t, "result_larger_than_an_item_holds")
		r.replayed(t, msg, size+2 <= r.target.MaxResult || r.target.MaxResult == 0, "big-result")
	}},
	{"result_not_UTF-8", func(t *testing.T, r *badRun) {
		typed := lambdakit.TypedResult(func(ctx context.Context, p badPayload) (string, error) {
			r.count(p.ID)
			return "", nil
		})
		// Bytes that are not UTF-8, as a handler may return them.
		r.inner = lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if _, err := typed.Handle(ctx, msg); err != nil {
				return nil, err
			}
			if strings.Contains(msg.Body, "raw") {
				return []byte("\xff\xfe not text"), nil
			}
			return []byte(`"ok"`), nil
		})
		msg := lambdakittest.Message(`{"id":"raw"}`)
		r.batch(t, lambdakittest.Event(msg, good("result_not_UTF-8")))
		r.succeeded(t, 0)
		r.alone(t, "result_not_UTF-8")
		r.replayed(t, msg, !r.target.TextResultsOnly, "raw")
	}},
}

// bigBody is the row for a body of about size bytes: accepted, its record
// holding hashes only.
func bigBody(size int) func(*testing.T, *badRun) {
	return func(t *testing.T, r *badRun) {
		row := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
		r.batch(t, lambdakittest.Event(lambdakittest.Message(padded("big-"+row, size-64)), good(row)))
		r.succeeded(t, 0)
		r.alone(t, row)
		if n := r.ran("big-" + row); n != 1 {
			t.Errorf("the big record's handler ran %d times; want 1", n)
		}
	}
}

// replayed redelivers msg and checks that it is a duplicate (the handler
// does not run again) that replays the first result if kept is true, or no
// result, with a warning logged the first time, if it is false.
func (r *badRun) replayed(t *testing.T, msg events.SQSMessage, kept bool, id string) {
	t.Helper()
	first := r.result[msg.MessageId]
	warned := len(r.lines(t, msg.MessageId, "idempotency: result not cached")) == 1
	if warned == kept {
		t.Errorf("\"result not cached\" warning logged: %t; want %t", warned, !kept)
	}
	again := lambdakittest.Redelivery(msg)
	r.batch(t, lambdakittest.Event(again))
	r.succeeded(t, 0)
	if n := r.ran(id); n != 1 {
		t.Errorf("the handler ran %d times; want 1, the redelivery being a duplicate", n)
	}
	got := r.result[again.MessageId]
	switch {
	case kept && string(got) != string(first):
		t.Errorf("duplicate: got a result of %d bytes; want the first one's %d", len(got), len(first))
	case !kept && got != nil:
		t.Errorf("duplicate: got a result of %d bytes; want none, the store could not keep it", len(got))
	}
}

// clipped is err's message cut to 300 bytes, for test messages: some rows
// put very long keys into errors.
func clipped(err error) string {
	if err == nil {
		return "<nil>"
	}
	if s := err.Error(); len(s) > 300 {
		return s[:300] + "…"
	}
	return err.Error()
}
