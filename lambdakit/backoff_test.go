package lambdakit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// changes records the visibility calls a batch makes; refuse names the
// receipt handles it answers refused, and fail fails every call.
type changes struct {
	mu     sync.Mutex
	calls  [][]lambdakit.VisibilityChange
	refuse map[string]bool
	fail   error
}

func (c *changes) ChangeVisibility(_ context.Context, in []lambdakit.VisibilityChange) ([]error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, in)
	if c.fail != nil {
		return nil, c.fail
	}
	out := make([]error, len(in))
	for i, ch := range in {
		if c.refuse[ch.ReceiptHandle] {
			out[i] = errors.New("ReceiptHandleIsInvalid")
		}
	}
	return out, nil
}

// byHandle returns every change made, by receipt handle.
func (c *changes) byHandle() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Duration{}
	for _, call := range c.calls {
		for _, ch := range call {
			out[ch.ReceiptHandle] = ch.Timeout
		}
	}
	return out
}

// outage fails every record whose body holds "fail", permanently if it
// holds "perm".
var outage = lambdakit.HandlerFunc(func(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
	switch {
	case strings.Contains(msg.Body, "perm"):
		return nil, lambdakit.Permanent(errors.New("card expired"))
	case strings.Contains(msg.Body, "fail"):
		return nil, errors.New("gateway down")
	}
	return nil, nil
})

func withBackoff(c *changes, bo lambdakit.Backoff) func(*lambdakit.BatchOptions) {
	return func(o *lambdakit.BatchOptions) {
		bo.Changer = c
		o.Backoff = &bo
		o.AllowAllFailed = true
	}
}

// received sets the message's ApproximateReceiveCount, a system attribute
// (Attributes), where SQS puts it; a message attribute of that name is
// the sender's, and the batch ignores it.
func received(count int) func(*events.SQSMessage) {
	return func(m *events.SQSMessage) { m.Attributes["ApproximateReceiveCount"] = strconv.Itoa(count) }
}

func TestBackoffDelayHonoursFloorJitterAndCap(t *testing.T) {
	floor, base, limit := 30*time.Second, 10*time.Second, 5*time.Minute
	for seed := range uint64(20) {
		c := &changes{}
		b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: floor, Base: base, Cap: limit, Rand: rand.New(rand.NewPCG(seed, 1))}))
		var msgs []events.SQSMessage
		for n := 1; n <= 8; n++ {
			msgs = append(msgs, lambdakittest.Message(fmt.Sprintf("fail %d", n), received(n)))
		}
		if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
			t.Fatal(err)
		}
		got := c.byHandle()
		for i, m := range msgs {
			n := i + 1
			window := min(base<<(n-1), limit-floor)
			d, ok := got[m.ReceiptHandle]
			switch {
			case !ok:
				t.Fatalf("seed %d, receive %d: visibility not changed", seed, n)
			case d < floor || d > floor+window+time.Second-1 || d > limit:
				t.Errorf("seed %d, receive %d: delay %v; want in [%v, %v], at most %v", seed, n, d, floor, floor+window, limit)
			case d%time.Second != 0:
				t.Errorf("seed %d, receive %d: delay %v; want whole seconds", seed, n, d)
			}
		}
	}
}

func TestBackoffSameSeedSameDelays(t *testing.T) {
	run := func() map[string]time.Duration {
		c := &changes{}
		b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second, Rand: rand.New(rand.NewPCG(7, 7))}))
		msg := lambdakittest.Message("fail", received(6))
		msg.ReceiptHandle = "rh-same"
		if _, err := b(batchCtx(t), lambdakittest.Event(msg)); err != nil {
			t.Fatal(err)
		}
		return c.byHandle()
	}
	if a, b := run()["rh-same"], run()["rh-same"]; a != b || a == 0 {
		t.Errorf("got delays %v and %v from one seed; want the same, not zero", a, b)
	}
}

func TestBackoffCapAtMostTwelveHoursLessWindowAndTimeout(t *testing.T) {
	c := &changes{}
	b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Hour, Base: 8 * time.Hour, Cap: 24 * time.Hour,
		BatchingWindow: 5 * time.Minute, FunctionTimeout: 10 * time.Minute, Rand: rand.New(rand.NewPCG(1, 2))}))
	var msgs []events.SQSMessage
	for range 20 {
		msgs = append(msgs, lambdakittest.Message("fail", received(5)))
	}
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	most := lambdakit.MaxVisibility - 15*time.Minute
	for h, d := range c.byHandle() {
		if d > most {
			t.Errorf("%s: delay %v; want at most %v", h, d, most)
		}
	}
}

func TestBackoffOnlyTransientFailures(t *testing.T) {
	c := &changes{}
	b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second}))
	ok := lambdakittest.Message("ok")
	transient := lambdakittest.Message("fail")
	permanent := lambdakittest.Message("perm")
	if _, err := b(batchCtx(t), lambdakittest.Event(ok, transient, permanent)); err != nil {
		t.Fatal(err)
	}
	got := c.byHandle()
	if _, ok := got[transient.ReceiptHandle]; !ok || len(got) != 1 {
		t.Errorf("got changes %v; want the transient failure's alone", got)
	}
}

// SQS delivers no later message of a FIFO group while an earlier one is
// hidden: delaying the failed record holds the group back in order, and the
// records skipped behind it need no change.
func TestBackoffFIFODelaysTheFailedRecordNotTheSkipped(t *testing.T) {
	c := &changes{}
	b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second}))
	fifo := func(m *events.SQSMessage) { m.EventSourceARN = lambdakittest.FIFOQueueARN }
	first := lambdakittest.Message("fail", fifo, lambdakittest.InGroup("g"))
	skipped := lambdakittest.Message("ok", fifo, lambdakittest.InGroup("g"))
	resp, err := b(batchCtx(t), lambdakittest.Event(first, skipped))
	if err != nil {
		t.Fatal(err)
	}
	wantFailed(t, resp, first.MessageId, skipped.MessageId)
	got := c.byHandle()
	if _, ok := got[first.ReceiptHandle]; !ok || len(got) != 1 {
		t.Errorf("got changes %v; want the failed record's alone", got)
	}
}

func TestBackoffCallsOfAtMostTen(t *testing.T) {
	c := &changes{}
	b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second}))
	var msgs []events.SQSMessage
	for range 25 {
		msgs = append(msgs, lambdakittest.Message("fail"))
	}
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, call := range c.calls {
		if len(call) > 10 {
			t.Errorf("got a call of %d entries; want at most 10", len(call))
		}
		total += len(call)
	}
	if len(c.calls) != 3 || total != 25 {
		t.Errorf("got %d calls of %d entries in all; want 3 of 25", len(c.calls), total)
	}
}

func TestBackoffRefusedEntryLoggedNotFatal(t *testing.T) {
	bad := lambdakittest.Message("fail")
	good := lambdakittest.Message("fail")
	c := &changes{refuse: map[string]bool{bad.ReceiptHandle: true}}
	b, log := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second}))
	resp, err := b(batchCtx(t), lambdakittest.Event(bad, good, lambdakittest.Message("ok")))
	if err != nil {
		t.Fatal(err)
	}
	wantFailed(t, resp, bad.MessageId, good.MessageId)
	lines := log.byMessageID(t)
	if got, _ := lines[bad.MessageId]["retryNotDelayed"].(string); !strings.Contains(got, "ReceiptHandleIsInvalid") {
		t.Errorf("refused record's line: retryNotDelayed %q; want the refusal", got)
	}
	if got, _ := lines[good.MessageId]["retryInSeconds"].(float64); got < 1 {
		t.Errorf("delayed record's line: retryInSeconds %v; want at least the floor", got)
	}
}

func TestBackoffFailedCallLoggedOncePerContainer(t *testing.T) {
	c := &changes{fail: errors.New("AccessDenied")}
	b, log := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: time.Second}))
	for range 3 {
		resp, err := b(batchCtx(t), lambdakittest.Event(lambdakittest.Message("fail"), lambdakittest.Message("ok")))
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Fatalf("got %v, %v; want the failed record reported, no error", resp, err)
		}
	}
	warned := 0
	for _, line := range log.Lines(t) {
		if line["level"] == "WARN" && strings.Contains(line["msg"].(string), "visibility change failed") {
			warned++
		}
		if line["level"] == "ERROR" {
			if got, _ := line["retryNotDelayed"].(string); !strings.Contains(got, "AccessDenied") {
				t.Errorf("failed record's line: retryNotDelayed %q; want the call's error", got)
			}
		}
	}
	if warned != 1 {
		t.Errorf("got %d warnings over 3 invocations; want 1", warned)
	}
}

func TestBackoffMetricsCountDelays(t *testing.T) {
	c := &changes{}
	var out bytes.Buffer
	b, _ := newBatch(outage, withBackoff(c, lambdakit.Backoff{Floor: 2 * time.Second, Cap: 2 * time.Second}), func(o *lambdakit.BatchOptions) {
		o.MetricsWriter = &out
	})
	if _, err := b(batchCtx(t), lambdakittest.Event(lambdakittest.Message("fail"), lambdakittest.Message("fail"), lambdakittest.Message("perm"))); err != nil {
		t.Fatal(err)
	}
	m := emfLine(t, out.Bytes())
	if m["Delayed"] != 2.0 || m["DelayTotal"] != 4.0 || m["DelayMax"] != 2.0 {
		t.Errorf("got Delayed %v, DelayTotal %v, DelayMax %v; want 2, 4, 2", m["Delayed"], m["DelayTotal"], m["DelayMax"])
	}
}

func TestBackoffWarnsWhenLongestWaitPassesRetention(t *testing.T) {
	_, log := newBatch(outage, withBackoff(&changes{}, lambdakit.Backoff{Floor: time.Minute, Cap: time.Hour,
		MaxReceiveCount: 10, Retention: 4 * time.Hour, RecordTTL: 24 * time.Hour}))
	var warned []string
	for _, line := range log.Lines(t) {
		if line["level"] == "WARN" {
			warned = append(warned, line["msg"].(string))
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "retention") {
		t.Errorf("got warnings %q; want one, on the retention", warned)
	}
}

// stalled is a changer whose calls never answer: with ignoreCtx it does
// not even see its context end, like a client without timeouts; else it
// returns the context's error, as the SDK does when a call is cancelled.
// After stall is set to false it fails every call with fail.
type stalled struct {
	mu        sync.Mutex
	stall     bool
	ignoreCtx bool
	release   chan struct{}
	fail      error
}

func (s *stalled) ChangeVisibility(ctx context.Context, _ []lambdakit.VisibilityChange) ([]error, error) {
	s.mu.Lock()
	stall, ignoreCtx, fail := s.stall, s.ignoreCtx, s.fail
	s.mu.Unlock()
	switch {
	case stall && ignoreCtx:
		<-s.release
		return nil, errors.New("answered too late")
	case stall:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, fail
}

// answerWithin runs one invocation with a deadline of a second and fails
// the test if the batch has not answered by the deadline.
func answerWithin(t *testing.T, b lambdakit.BatchFunc, event events.SQSEvent) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	type answer struct {
		resp events.SQSEventResponse
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := b(ctx, event)
		got <- answer{resp, err}
	}()
	select {
	case a := <-got:
		if time.Now().After(deadline) {
			t.Errorf("batch answered %v after its deadline", time.Since(deadline))
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.resp
	case <-time.After(3 * time.Second):
		t.Fatal("batch did not answer within 2s past its deadline: the visibility calls hold the answer")
	}
	return events.SQSEventResponse{}
}

func TestBackoffHungChangerDoesNotHoldTheAnswer(t *testing.T) {
	s := &stalled{stall: true, ignoreCtx: true, release: make(chan struct{})}
	defer close(s.release) // the hung call returns after the test
	b, log := newBatch(outage, func(o *lambdakit.BatchOptions) {
		o.Backoff = &lambdakit.Backoff{Changer: s, Floor: time.Second}
		o.AllowAllFailed = true
		o.DeadlineMargin = 200 * time.Millisecond
	})
	msg := lambdakittest.Message("fail")
	resp := answerWithin(t, b, lambdakittest.Event(msg, lambdakittest.Message("ok")))
	wantFailed(t, resp, msg.MessageId)
	if got, _ := log.byMessageID(t)[msg.MessageId]["retryNotDelayed"].(string); got == "" {
		t.Errorf("failed record's line has no retryNotDelayed; want why its visibility was not changed")
	}
}

// A call cut short by the batch's own deadline says nothing about the
// function's permission: it must not use up the once-per-container
// warning that an AccessDenied later needs.
func TestBackoffCallCutAtDeadlineKeepsTheFailedCallWarning(t *testing.T) {
	s := &stalled{stall: true, fail: errors.New("AccessDenied")}
	b, log := newBatch(outage, func(o *lambdakit.BatchOptions) {
		o.Backoff = &lambdakit.Backoff{Changer: s, Floor: time.Second}
		o.AllowAllFailed = true
		o.DeadlineMargin = 200 * time.Millisecond
	})
	answerWithin(t, b, lambdakittest.Event(lambdakittest.Message("fail")))
	s.mu.Lock()
	s.stall = false
	s.mu.Unlock()
	answerWithin(t, b, lambdakittest.Event(lambdakittest.Message("fail")))
	var reasons []string
	for _, line := range log.Lines(t) {
		if line["level"] == "WARN" && strings.Contains(line["msg"].(string), "visibility change failed") {
			reasons = append(reasons, fmt.Sprint(line["reason"]))
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "AccessDenied") {
		t.Errorf("got failed-call warnings with reasons %q; want one, on the AccessDenied", reasons)
	}
}

// SQS refuses a visibility timeout that ends more than 12 hours after the
// receipt: whatever the configuration, no delay may pass 12 hours less the
// batching window and the function's timeout.
func TestBackoffNoDelayPastTwelveHours(t *testing.T) {
	for _, tc := range []struct {
		name string
		bo   lambdakit.Backoff
		most time.Duration
	}{
		{"floor of 12 hours", lambdakit.Backoff{Floor: 12 * time.Hour}, lambdakit.MaxVisibility - 15*time.Minute},
		{"floor above the cap's most", lambdakit.Backoff{Floor: 11*time.Hour + 55*time.Minute, BatchingWindow: 5 * time.Minute, FunctionTimeout: time.Minute},
			lambdakit.MaxVisibility - 6*time.Minute},
		{"negative batching window", lambdakit.Backoff{Floor: time.Hour, Base: 12 * time.Hour, BatchingWindow: -time.Hour, FunctionTimeout: time.Minute},
			lambdakit.MaxVisibility - time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &changes{}
			tc.bo.Rand = rand.New(rand.NewPCG(3, 4))
			b, _ := newBatch(outage, withBackoff(c, tc.bo))
			var msgs []events.SQSMessage
			for range 20 {
				msgs = append(msgs, lambdakittest.Message("fail", received(30)))
			}
			if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
				t.Fatal(err)
			}
			for h, d := range c.byHandle() {
				if d > tc.most {
					t.Errorf("%s: delay %v; want at most %v", h, d, tc.most)
				}
			}
		})
	}
}

// A throttled invocation is retried by Lambda until the messages' visibility
// timeout (the queue's, Floor) runs out, so a batch may start up to Floor
// after the receipt, not only BatchingWindow after it. SQS refuses a change
// that ends more than 12 hours after the receipt, and a refused message comes
// back after Floor alone: the change must fit even then. Past a refusal,
// every receive of an outage counts at the floor's pace toward the DLQ.
func TestBackoffNoDelayPastTwelveHoursAfterThrottledRetries(t *testing.T) {
	bo := lambdakit.Backoff{Floor: 2 * time.Hour, FunctionTimeout: 15 * time.Minute, BatchingWindow: time.Minute,
		Rand: rand.New(rand.NewPCG(5, 6))}
	c := &changes{}
	b, _ := newBatch(outage, withBackoff(c, bo))
	var msgs []events.SQSMessage
	for range 20 {
		msgs = append(msgs, lambdakittest.Message("fail", received(30)))
	}
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	most := lambdakit.MaxVisibility - bo.Floor - bo.FunctionTimeout
	got := c.byHandle()
	if len(got) != len(msgs) {
		t.Fatalf("%d messages delayed; want %d", len(got), len(msgs))
	}
	for h, d := range got {
		if d > most {
			t.Errorf("%s: delay %v; want at most %v (12 h less the floor and the function's timeout)", h, d, most)
		}
	}
}

// exitingChanger calls runtime.Goexit, as a test's t.FailNow in a changer
// would: the call made no change, and the record must not be counted as
// delayed.
type exitingChanger struct{}

func (exitingChanger) ChangeVisibility(context.Context, []lambdakit.VisibilityChange) ([]error, error) {
	runtime.Goexit()
	return nil, nil
}

func TestBackoffChangerGoexitNotCountedDelayed(t *testing.T) {
	var out bytes.Buffer
	b, log := newBatch(outage, func(o *lambdakit.BatchOptions) {
		o.Backoff = &lambdakit.Backoff{Changer: exitingChanger{}, Floor: time.Second}
		o.AllowAllFailed = true
		o.MetricsWriter = &out
	})
	msg := lambdakittest.Message("fail")
	if _, err := b(batchCtx(t), lambdakittest.Event(msg)); err != nil {
		t.Fatal(err)
	}
	line := log.byMessageID(t)[msg.MessageId]
	if _, delayed := line["retryInSeconds"]; delayed || line["retryNotDelayed"] == nil {
		t.Errorf("record's line: retryInSeconds %v, retryNotDelayed %v; want not delayed", line["retryInSeconds"], line["retryNotDelayed"])
	}
	if m := emfLine(t, out.Bytes()); m["Delayed"] != 0.0 {
		t.Errorf("got Delayed %v; want 0", m["Delayed"])
	}
}

// overlapSource is a rand.Source that notices being drawn from by two
// goroutines at once: its first draw waits, up to a bound, for a second
// one to start.
type overlapSource struct {
	inside   atomic.Int32
	overlap  atomic.Bool
	first    sync.Once
	arrived  chan struct{}
	arriveMu sync.Once
}

func (s *overlapSource) Uint64() uint64 {
	if s.inside.Add(1) > 1 {
		s.overlap.Store(true)
		s.arriveMu.Do(func() { close(s.arrived) })
	}
	s.first.Do(func() {
		select {
		case <-s.arrived:
		case <-time.After(150 * time.Millisecond): // the overlap, when there is one, comes within microseconds
		}
	})
	s.inside.Add(-1)
	return 42
}

// Invocations running at once in one process (Lambda Managed Instances)
// share the Batch, and so the Backoff's Rand: a *rand.Rand is not safe for
// concurrent use, so their draws must not overlap.
func TestBackoffRandNotDrawnFromTwoInvocationsAtOnce(t *testing.T) {
	src := &overlapSource{arrived: make(chan struct{})}
	started := make(chan struct{}, 2)
	both := make(chan struct{})
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		started <- struct{}{}
		<-both // both invocations' records are running: they fail, and draw, together
		return nil, errors.New("gateway down")
	})
	c := &changes{}
	b, _ := newBatch(h, withBackoff(c, lambdakit.Backoff{Floor: time.Second, Rand: rand.New(src)}))
	invoke := func() error {
		_, err := b(batchCtx(t), lambdakittest.Event(lambdakittest.Message("fail")))
		return err
	}
	together(t, 2, started, both, invoke, invoke)
	if src.overlap.Load() {
		t.Error("two invocations drew from the Backoff's Rand at the same time; want one at a time")
	}
	if got := len(c.byHandle()); got != 2 {
		t.Errorf("%d visibility changes; want 2, one per invocation's failed record", got)
	}
}
