package esm_test

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// TestRun holds the integration tests, so that they share one build of the
// test function, removed with TestRun's temporary directory.
func TestRun(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	bootstrap := buildFunction(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"event has every field Lambda sets/standard queue", func(t *testing.T, h *harness) { testEventFields(t, h, false) }},
		{"event has every field Lambda sets/FIFO queue", func(t *testing.T, h *harness) { testEventFields(t, h, true) }},
		{"named records come back and the rest are deleted", testPartialBatch},
		{"whole batch", testWholeBatch},
		{"poison message moves to the DLQ", testDLQ},
		{"FIFO order is kept across batches", testFIFOOrder},
		{"FIFO group never in two batches at once", testFIFOGroupExclusive},
		{"FIFO order is kept when a group's failed records come back together", testFIFOOrderAfterRedelivery},
		{"events are cut at 6 MB", testPayloadLimit},
		{"FIFO records after a cut wait for their group", testFIFOHoldBack},
		{"stop lets the batch in flight finish", testStop},
		{"a queue deleted under a batch fails its deletes and stops the run", testQueueDeleted},
		{"until-empty waits for delayed messages", testDelayed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t, client, bootstrap))
		})
	}
}

// receiveRecorder keeps every message ReceiveMessage returned, to compare
// the event with what SQS said.
type receiveRecorder struct {
	mu   sync.Mutex
	msgs map[string]types.Message // by message ID, the latest delivery
}

func (r *receiveRecorder) apiOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("esmtest.receiveRecorder",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if res, ok := out.Result.(*sqs.ReceiveMessageOutput); ok {
				r.mu.Lock()
				for _, m := range res.Messages {
					r.msgs[aws.ToString(m.MessageId)] = m
				}
				r.mu.Unlock()
			}
			return out, md, err
		}), middleware.After)
}

func testEventFields(t *testing.T, h *harness, fifo bool) {
	url, arn := h.queue(fifo, nil)
	strAttr := func(dataType, v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: aws.String(v)}
	}
	sent := []struct {
		body  string
		attrs map[string]types.MessageAttributeValue
	}{
		{`{"payment_id": "pay_1", "note": "<a & b>"}`, map[string]types.MessageAttributeValue{
			"idempotency-key": strAttr("String", "pay_1"),
			"amount":          strAttr("Number", "1299"),
			"blob":            {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 250}},
			"kind":            strAttr("String.payment", "card"),
		}},
		{"plain text, no attributes", nil},
	}
	type sentMsg struct {
		id, group, dedup, seq string
	}
	var want []sentMsg
	for i, s := range sent {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(s.body), MessageAttributes: s.attrs}
		var m sentMsg
		if fifo {
			m.group, m.dedup = "group-"+string(rune('A'+i)), "dedup-"+string(rune('a'+i))
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(m.group), aws.String(m.dedup)
		}
		out, err := h.client.SendMessage(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		m.id, m.seq = aws.ToString(out.MessageId), aws.ToString(out.SequenceNumber)
		want = append(want, m)
	}

	rec := &receiveRecorder{msgs: map[string]types.Message{}}
	h.client = sqs.New(h.client.Options(), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, rec.apiOption) })
	s := h.run(url, h.runner(5*time.Second))
	if s.Records != 2 || s.Deleted != 2 || s.Left != 0 || s.FunctionErrors != 0 {
		t.Errorf("summary %+v; want 2 records, both deleted", s)
	}

	var got []events.SQSMessage
	var raws []map[string]json.RawMessage
	for _, inv := range h.invocations() {
		got = append(got, inv.Event.Records...)
		var raw struct{ Records []map[string]json.RawMessage }
		if err := json.Unmarshal(inv.Raw, &raw); err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw.Records...)
	}
	if len(got) != len(sent) {
		t.Fatalf("the function got %d records; want %d", len(got), len(sent))
	}
	for i, r := range got {
		w, s := want[i], sent[i]
		if r.MessageId != w.id {
			t.Fatalf("record %d is message %s; want %s (the order sent)", i, r.MessageId, w.id)
		}
		m, ok := rec.msgs[r.MessageId]
		if !ok {
			t.Fatalf("record %s: no ReceiveMessage returned it", r.MessageId)
		}
		sum := md5.Sum([]byte(s.body))
		for _, c := range []struct{ field, got, want string }{
			{"receiptHandle", r.ReceiptHandle, aws.ToString(m.ReceiptHandle)},
			{"body", r.Body, s.body},
			{"md5OfBody", r.Md5OfBody, hex.EncodeToString(sum[:])},
			{"md5OfBody as SQS said", r.Md5OfBody, aws.ToString(m.MD5OfBody)},
			{"md5OfMessageAttributes", r.Md5OfMessageAttributes, aws.ToString(m.MD5OfMessageAttributes)},
			{"eventSource", r.EventSource, "aws:sqs"},
			{"eventSourceARN", r.EventSourceARN, arn},
			{"awsRegion", r.AWSRegion, "us-east-1"},
			{"attributes.ApproximateReceiveCount", r.Attributes["ApproximateReceiveCount"], "1"},
			{"attributes.MessageGroupId", r.Attributes["MessageGroupId"], w.group},
			{"attributes.MessageDeduplicationId", r.Attributes["MessageDeduplicationId"], w.dedup},
			{"attributes.SequenceNumber", r.Attributes["SequenceNumber"], w.seq},
		} {
			if c.got != c.want {
				t.Errorf("record %d: %s = %q; want %q", i, c.field, c.got, c.want)
			}
		}
		if s.attrs != nil && r.Md5OfMessageAttributes == "" {
			t.Errorf("record %d: md5OfMessageAttributes is empty; want SQS's digest", i)
		}
		if !maps.Equal(r.Attributes, m.Attributes) {
			t.Errorf("record %d: attributes %v; want what SQS returned, %v", i, r.Attributes, m.Attributes)
		}
		for _, name := range []string{"SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} {
			if r.Attributes[name] == "" {
				t.Errorf("record %d: attribute %s missing from %v", i, name, r.Attributes)
			}
		}
		if len(r.MessageAttributes) != len(s.attrs) {
			t.Errorf("record %d: %d message attributes; want %d", i, len(r.MessageAttributes), len(s.attrs))
		}
		for name, sa := range s.attrs {
			ga := r.MessageAttributes[name]
			if ga.DataType != aws.ToString(sa.DataType) || aws.ToString(ga.StringValue) != aws.ToString(sa.StringValue) ||
				string(ga.BinaryValue) != string(sa.BinaryValue) || ga.StringListValues == nil || ga.BinaryListValues == nil {
				t.Errorf("record %d: message attribute %s = {%s %q %v lists %v %v}; want {%s %q %v} with empty lists", i, name,
					ga.DataType, aws.ToString(ga.StringValue), ga.BinaryValue, ga.StringListValues, ga.BinaryListValues,
					aws.ToString(sa.DataType), aws.ToString(sa.StringValue), sa.BinaryValue)
			}
		}

		// The JSON itself: Lambda's field names, [] and {} rather than null.
		raw := raws[i]
		for _, field := range []string{"messageId", "receiptHandle", "body", "md5OfBody", "attributes", "messageAttributes", "eventSource", "eventSourceARN", "awsRegion"} {
			if _, ok := raw[field]; !ok {
				t.Errorf("record %d: no %q in %s", i, field, raw)
			}
		}
		if string(raw["messageAttributes"]) == "null" || string(raw["attributes"]) == "null" {
			t.Errorf("record %d: null attributes in the event; want objects", i)
		}
		// Lambda sends null, not "", for a message without attributes.
		if md5, want := string(raw["md5OfMessageAttributes"]), `"`+aws.ToString(m.MD5OfMessageAttributes)+`"`; len(s.attrs) == 0 && md5 != "null" ||
			len(s.attrs) > 0 && md5 != want {
			t.Errorf("record %d (%d message attributes): md5OfMessageAttributes %s; want %s", i, len(s.attrs), md5, map[bool]string{true: "null", false: want}[len(s.attrs) == 0])
		}
		var attrs map[string]map[string]json.RawMessage
		if err := json.Unmarshal(raw["messageAttributes"], &attrs); err != nil {
			t.Fatal(err)
		}
		for name, a := range attrs {
			if string(a["stringListValues"]) != "[]" || string(a["binaryListValues"]) != "[]" {
				t.Errorf("record %d: attribute %s lists %s %s; want [] []", i, name, a["stringListValues"], a["binaryListValues"])
			}
		}
		if b, ok := attrs["blob"]; ok && string(b["binaryValue"]) != `"`+base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 250})+`"` {
			t.Errorf("record %d: binaryValue %s; want base64", i, b["binaryValue"])
		}
	}
}

func testPartialBatch(t *testing.T, h *harness) {
	url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "1"})
	h.send(url, "m1", "m2 fail@1", "m3", "m4 fail@1", "m5")
	// No window: the first receive after the batch finds the queue empty but
	// for the two records in flight, which must not stop the run.
	s := h.run(url, h.runner(5*time.Second))

	got := deliveries(h.invocations())
	want := map[string][]string{"m1": {"1"}, "m2": {"1", "2"}, "m3": {"1"}, "m4": {"1", "2"}, "m5": {"1"}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("deliveries by label (receive counts) %v; want %v: the named records once more, the rest never", got, want)
	}
	if s.Records != 7 || s.Deleted != 5 || s.Left != 2 || s.ItemFailures != 2 || s.FunctionErrors != 0 || s.InvalidResponses != 0 || !s.Empty {
		t.Errorf("summary %+v; want 7 records, 5 deleted, 2 left, 2 item failures, no errors, stopped on empty", s)
	}
	pids := map[int]bool{}
	for _, inv := range h.invocations() {
		pids[inv.PID] = true
	}
	if len(pids) != 1 {
		t.Errorf("the function ran in %d processes; want 1 warm process", len(pids))
	}
}

// testWholeBatch: whatever fails the invocation, or breaks the response
// rules, leaves every record of the batch; other responses delete it all.
func testWholeBatch(t *testing.T, h *harness) {
	tests := []struct {
		name        string
		trigger     string
		timeout     time.Duration
		invalid     bool // counted as an invalid response rather than a function error
		succeeds    bool // the whole batch is deleted at once
		newProcess  bool // the failure costs the warm process
		functionErr bool
		noReport    bool // FunctionResponseTypes without ReportBatchItemFailures
	}{
		{name: "function error", trigger: "error@1", functionErr: true},
		{name: "crash", trigger: "crash@1", functionErr: true, newProcess: true},
		{name: "timeout", trigger: "sleep=3000@1", timeout: time.Second, functionErr: true, newProcess: true},
		{name: "unknown itemIdentifier", trigger: "badid@1", invalid: true},
		{name: "empty itemIdentifier", trigger: "emptyid@1", invalid: true},
		{name: "entry without itemIdentifier", trigger: "noid@1", invalid: true},
		{name: "response not JSON", trigger: "invalid@1", invalid: true},
		{name: "response a JSON string", trigger: "string@1", invalid: true},
		{name: "response without batchItemFailures deletes all", trigger: "extra@1", succeeds: true},
		{name: "without ReportBatchItemFailures named records are deleted too", trigger: "fail@1", succeeds: true, noReport: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, h.client, h.bootstrap)
			url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "1"})
			h.send(url, "a", "b "+tt.trigger, "c")
			timeout := 5 * time.Second
			if tt.timeout > 0 {
				timeout = tt.timeout
			}
			// The window gathers the three into one batch.
			s := h.run(url, h.runner(timeout), func(o *esm.Options) {
				o.BatchSize, o.Window = 3, time.Second
				o.ReportBatchItemFailures = !tt.noReport
			})

			invs := h.invocations()
			got := deliveries(invs)
			want := map[string][]string{"a": {"1", "2"}, "b": {"1", "2"}, "c": {"1", "2"}}
			wantSummary := esm.Summary{Invocations: 2, Records: 6, Deleted: 3, Left: 3, Empty: true}
			if tt.succeeds {
				want = map[string][]string{"a": {"1"}, "b": {"1"}, "c": {"1"}}
				wantSummary = esm.Summary{Invocations: 1, Records: 3, Deleted: 3, Empty: true}
			}
			if tt.invalid {
				wantSummary.InvalidResponses = 1
			}
			if tt.functionErr {
				wantSummary.FunctionErrors = 1
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("deliveries by label (receive counts) %v; want %v", got, want)
			}
			// Several pollers may split the redelivered records into more
			// batches than one, as Lambda's may.
			if s.Invocations > wantSummary.Invocations && s.Invocations <= wantSummary.Invocations+2 {
				wantSummary.Invocations = s.Invocations
			}
			if s != wantSummary {
				t.Errorf("summary %+v; want %+v", s, wantSummary)
			}
			if len(invs) == 2 && (invs[0].PID != invs[1].PID) != tt.newProcess {
				t.Errorf("processes %d then %d; want a new one after the failure: %v", invs[0].PID, invs[1].PID, tt.newProcess)
			}
		})
	}
}

func testDLQ(t *testing.T, h *harness) {
	dlqURL, dlqARN := h.queue(false, nil)
	policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlqARN, "maxReceiveCount": "2"})
	url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "1", "RedrivePolicy": string(policy)})
	ids := h.send(url, "poison fail", "fine")
	var mu sync.Mutex
	var toDLQ []int // each batch's ToDeadLetterQueue
	s := h.run(url, h.runner(5*time.Second), func(o *esm.Options) {
		o.PollWait = time.Second // long polls
		o.OnBatch = func(b esm.BatchResult) {
			mu.Lock()
			defer mu.Unlock()
			toDLQ = append(toDLQ, b.ToDeadLetterQueue)
		}
	})
	mu.Lock()
	if sum(toDLQ) != 1 {
		t.Errorf("the batches' ToDeadLetterQueue %v; want one batch telling of the poison message's move", toDLQ)
	}
	mu.Unlock()

	got := deliveries(h.invocations())
	want := map[string][]string{"poison": {"1", "2"}, "fine": {"1"}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("deliveries by label (receive counts) %v; want %v: the poison message maxReceiveCount times", got, want)
	}
	if s.Records != 3 || s.Deleted != 1 || s.Left != 2 || s.ItemFailures != 2 || s.ToDeadLetterQueue != 1 || !s.Empty {
		t.Errorf("summary %+v; want 3 records, 1 deleted, 2 left (the second to the DLQ), 2 item failures, stopped on empty", s)
	}
	out, err := h.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != ids[0] || aws.ToString(out.Messages[0].Body) != "poison fail" {
		t.Errorf("DLQ holds %+v; want the poison message %s alone", out.Messages, ids[0])
	}
}

// testFIFOOrder fails a record in the middle of each group: the group's
// later records must not run before it succeeds. Batches of one record keep
// a single message of a group in flight: moto 5.2 hands several in-flight
// messages of a group back last first after their visibility timeout (real
// SQS keeps the order), and the test is about the mapping, not moto.
func testFIFOOrder(t *testing.T, h *harness) {
	url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "1"})
	for i := 1; i <= 5; i++ {
		for _, g := range []string{"A", "B"} {
			body := g + string(rune('0'+i))
			if body == "A2" || body == "B4" {
				body += " fail@1"
			}
			h.sendFIFO(url, g, body)
		}
	}
	pool := esm.NewPool(h.runner(5*time.Second), h.runner(5*time.Second))
	s := h.run(url, pool, func(o *esm.Options) { o.BatchSize, o.Concurrency = 1, 2 })

	invs := h.invocations()
	done := doneByGroup(invs)
	want := map[string][]string{"A": {"A1", "A2", "A3", "A4", "A5"}, "B": {"B1", "B2", "B3", "B4", "B5"}}
	if !maps.EqualFunc(done, want, slices.Equal) {
		t.Errorf("records done, by group, in order: %v; want %v", done, want)
	}
	if s.Deleted != 10 || s.FunctionErrors != 0 || !s.Empty {
		t.Errorf("summary %+v; want 10 deleted, no function errors", s)
	}
	checkGroupsExclusive(t, invs)
}

// doneByGroup returns the labels of the records the invocations succeeded
// with, in the order they ran, by group (a label's first letter).
func doneByGroup(invs []invocation) map[string][]string {
	done := map[string][]string{}
	for _, inv := range invs {
		for _, r := range inv.Event.Records {
			if !slices.Contains(inv.Failed, r.MessageId) {
				label := strings.Fields(r.Body)[0]
				done[label[:1]] = append(done[label[:1]], label)
			}
		}
	}
	return done
}

// testFIFOOrderAfterRedelivery fails two records of each of four groups
// in the same batch, in runs with two batches in flight: when they come
// back after their visibility timeout, SQS gives the older first. moto
// 5.2.1 gives the later one first (it skips the older while the later is
// still marked in flight) and can split a group between two concurrent
// receives; the launcher mends its receive and the mapping receives from a
// FIFO queue one call at a time, so the function sees SQS's order. A few
// runs, as the concurrent split depends on timing.
func testFIFOOrderAfterRedelivery(t *testing.T, h *harness) {
	const runs = 3
	for run := range runs {
		url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "1"})
		want := map[string][]string{}
		for i := 1; i <= 4; i++ {
			for _, g := range []string{"A", "B", "C", "D"} {
				label := fmt.Sprintf("%s%d", g, i)
				want[g] = append(want[g], label)
				if i == 2 || i == 3 {
					label += " fail@1"
				}
				h.sendFIFO(url, g, fmt.Sprintf("%s run%d", label, run))
			}
		}
		before := len(h.invocations())
		pool := esm.NewPool(h.runner(5*time.Second), h.runner(5*time.Second))
		s := h.run(url, pool, func(o *esm.Options) { o.BatchSize, o.Concurrency = 10, 2 })

		invs := h.invocations()[before:]
		done := doneByGroup(invs)
		if !maps.EqualFunc(done, want, slices.Equal) {
			t.Errorf("run %d of %d: records done, by group, in order: %v; want %v", run+1, runs, done, want)
			for _, inv := range invs {
				var recs []string
				for _, r := range inv.Event.Records {
					recs = append(recs, strings.Fields(r.Body)[0]+"#"+r.Attributes["ApproximateReceiveCount"]+"/"+r.Attributes["SequenceNumber"])
				}
				t.Logf("invocation at %s: %v, failed %d", inv.Start.Format(time.StampMilli), recs, len(inv.Failed))
			}
		}
		if s.Deleted != 16 || !s.Empty {
			t.Errorf("run %d: summary %+v; want 16 deleted", run+1, s)
		}
		checkGroupsExclusive(t, invs)
	}
}

// checkGroupsExclusive fails t if two invocations with a message group in
// common ran at the same time.
func checkGroupsExclusive(t *testing.T, invs []invocation) {
	t.Helper()
	for i, a := range invs {
		for _, b := range invs[i+1:] {
			for _, g := range a.groups() {
				if slices.Contains(b.groups(), g) && a.overlaps(b) {
					t.Errorf("invocations %s [%v, %v] and %s [%v, %v] both hold group %s",
						a.RequestID, a.Start.Format(time.StampMilli), a.End.Format(time.StampMilli),
						b.RequestID, b.Start.Format(time.StampMilli), b.End.Format(time.StampMilli), g)
				}
			}
		}
	}
}

// testFIFOGroupExclusive makes SQS hand a group out again while its batch
// still runs: the first batch of group A outlives the visibility timeout.
// The mapping must hold the redelivery until that batch is done, while
// batches of other groups run alongside.
func testFIFOGroupExclusive(t *testing.T, h *harness) {
	url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "1"})
	h.sendFIFO(url, "A", "A1 sleep=2500@1")
	h.sendFIFO(url, "A", "A2")
	for _, b := range []string{"B1 sleep=300", "B2 sleep=300", "C1 sleep=300", "C2 sleep=300"} {
		h.sendFIFO(url, b[:1], b)
	}
	pool := esm.NewPool(h.runner(5*time.Second), h.runner(5*time.Second), h.runner(5*time.Second))
	s := h.run(url, pool, func(o *esm.Options) { o.BatchSize, o.Concurrency = 1, 3 })

	invs := h.invocations()
	checkGroupsExclusive(t, invs)
	got := deliveries(invs)
	if n := len(got["A1"]); n < 2 {
		t.Errorf("A1 was delivered %d times; want it handed out again while its first batch ran", n)
	}
	parallel := false
	for i, a := range invs {
		for _, b := range invs[i+1:] {
			parallel = parallel || a.overlaps(b)
		}
	}
	if !parallel {
		t.Errorf("no two invocations overlapped; want batches of other groups to run beside A1's")
	}
	if s.FunctionErrors != 0 || !s.Empty {
		t.Errorf("summary %+v; want no function errors, stopped on empty", s)
	}
}

func testPayloadLimit(t *testing.T, h *harness) {
	url, _ := h.queue(false, nil)
	pad := strings.Repeat("x", 900_000)
	var bodies []string
	for i := range 7 {
		bodies = append(bodies, "big"+string(rune('1'+i))+" "+pad)
	}
	h.send(url, bodies...)
	s := h.run(url, h.runner(10*time.Second))

	invs := h.invocations()
	total := 0
	for _, inv := range invs {
		if len(inv.Raw) > esm.MaxPayload {
			t.Errorf("an event of %d bytes; want at most %d", len(inv.Raw), esm.MaxPayload)
		}
		total += len(inv.Event.Records)
	}
	if len(invs) != 2 || total != 7 {
		t.Errorf("%d invocations with %d records; want 2 with 7: 7 × 900 kB do not fit one 6 MB event", len(invs), total)
	}
	if s.Records != 7 || s.Deleted != 7 || s.Invocations != 2 {
		t.Errorf("summary %+v; want 7 records in 2 invocations, all deleted", s)
	}
}

// testFIFOHoldBack cuts a FIFO batch in two with a small payload limit: when
// the first part leaves a record of a group, the second part's records of
// that group must not run before it.
func testFIFOHoldBack(t *testing.T, h *harness) {
	url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "1"})
	pad := strings.Repeat("x", 2000)
	h.sendFIFO(url, "A", "A1 fail@1 "+pad)
	h.sendFIFO(url, "A", "A2 "+pad)
	h.sendFIFO(url, "A", "A3 "+pad)
	var batches []esm.BatchResult
	s := h.run(url, h.runner(5*time.Second), func(o *esm.Options) {
		o.MaxPayload = 6000 // two records of under 3 kB each
		o.OnBatch = func(b esm.BatchResult) { batches = append(batches, b) }
	})

	if len(batches) < 2 || len(batches[0].Records) != 2 || len(batches[1].Records) != 1 || !errors.Is(batches[1].Err, esm.ErrNotInvoked) {
		for i, b := range batches {
			t.Logf("batch %d: %d records, outcome %v, err %v", i, len(b.Records), b.Result.Outcome, b.Err)
		}
		t.Fatalf("want the first receive cut into A1+A2, invoked, then A3, held back")
	}

	// (The order of the second round is moto's: see testFIFOOrder.)
	got := deliveries(h.invocations())
	want := map[string][]string{"A1": {"1", "2"}, "A2": {"1", "2"}, "A3": {"2"}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("deliveries by label (receive counts) %v; want %v: A3 not run before A1 and A2 are done", got, want)
	}
	if s.NotInvoked != 1 || s.Deleted != 3 || s.Left != 3 || s.ItemFailures != 2 {
		t.Errorf("summary %+v; want 1 record not invoked, 3 deleted, 3 left, 2 item failures", s)
	}
}

// startSignal is an Invoker around a Runner that tells when an invocation
// starts.
type startSignal struct {
	*runtimeapi.Runner
	started chan struct{}
	once    sync.Once
}

func (s *startSignal) Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	s.once.Do(func() { close(s.started) })
	return s.Runner.Invoke(ctx, event, optFns...)
}

func testStop(t *testing.T, h *harness) {
	url, _ := h.queue(false, nil)
	h.send(url, "s1 sleep=1500", "s2", "s3", "s4", "s5")
	inv := &startSignal{Runner: h.runner(5 * time.Second), started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-inv.started:
			cancel()
		case <-time.After(15 * time.Second):
		}
	}()
	done := make(chan struct{})
	var s esm.Summary
	var err error
	go func() {
		defer close(done)
		// Two pollers, Lambda's least: at most two batches (four records)
		// can be taken before the stop, so one record is never received.
		s, err = h.runCtx(ctx, url, inv, func(o *esm.Options) { o.BatchSize, o.Window, o.Concurrency = 2, time.Second, esm.MinConcurrency })
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
	if err != nil {
		t.Fatalf("Run: %v; want nil after its context ended", err)
	}
	if s.Invocations < 1 || s.Invocations > 2 || s.Records > 4 || s.Deleted != s.Records || s.Empty {
		t.Errorf("summary %+v; want the one or two batches in flight finished and deleted, nothing more", s)
	}
	invs := h.invocations()
	if len(invs) != s.Invocations {
		t.Errorf("the function logged %d invocations; want %d", len(invs), s.Invocations)
	}
	for _, inv := range invs {
		if inv.End.IsZero() {
			t.Errorf("an invocation was not answered: %+v", inv)
		}
	}
	if visible, inFlight, _ := h.counts(url); visible != 5-s.Records || inFlight != 0 {
		t.Errorf("queue has %d visible, %d in flight; want %d visible, none in flight (nothing received after the stop)", visible, inFlight, 5-s.Records)
	}
}

func testDelayed(t *testing.T, h *harness) {
	url, _ := h.queue(false, nil)
	if _, err := h.client.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String("late"), DelaySeconds: 2,
	}); err != nil {
		t.Fatal(err)
	}
	s := h.run(url, h.runner(5*time.Second), func(o *esm.Options) { o.PollWait = time.Second }) // long polls
	if s.Records != 1 || s.Deleted != 1 || !s.Empty {
		t.Errorf("summary %+v; want the delayed message received and deleted before the stop", s)
	}
}

func testQueueDeleted(t *testing.T, h *harness) {
	url, _ := h.queue(false, nil)
	h.send(url, "q1 sleep=1000", "q2")
	inv := &startSignal{Runner: h.runner(5 * time.Second), started: make(chan struct{})}
	go func() {
		select {
		case <-inv.started:
			if _, err := h.client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
				t.Error(err)
			}
		case <-time.After(15 * time.Second):
		}
	}()
	var batches []esm.BatchResult
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := h.runCtx(ctx, url, inv, func(o *esm.Options) {
		o.BatchSize, o.Window = 2, time.Second
		o.OnBatch = func(b esm.BatchResult) { batches = append(batches, b) }
	})
	var gone *types.QueueDoesNotExist
	if !errors.Is(err, esm.ErrQueue) || !errors.As(err, &gone) {
		t.Errorf("Run error %v; want ErrQueue wrapping QueueDoesNotExist", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Run returned only at its deadline; want it to stop on the deleted queue")
	}
	if len(batches) != 1 || !errors.Is(batches[0].DeleteErr, esm.ErrDelete) || len(batches[0].Deleted) != 0 || len(batches[0].Left) != 2 {
		t.Fatalf("batches %+v; want one, whose two deletions failed", batches)
	}
	if s.Invocations != 1 || s.Records != 2 || s.Deleted != 0 || s.Left != 2 || s.DeleteFailures != 2 || s.FunctionErrors != 0 {
		t.Errorf("summary %+v; want 1 invocation, 2 records left after 2 failed deletes", s)
	}
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}
