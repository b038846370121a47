package esm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
)

// A response that names a record of the batch in batchItemFailures, next to
// an entry that would make the partial batch response invalid, is ignored
// without ReportBatchItemFailures as any other: the whole batch is deleted,
// the named record with it. The function named batchItemFailures that are
// ignored, so Run must say so, as it does for a well-formed list.
func TestIgnoredFailuresWarningForAnInvalidList(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	for _, tc := range []struct {
		name    string
		respond func(ev events.SQSEvent) string
	}{
		{"a record of the batch and an empty identifier", func(ev events.SQSEvent) string {
			return fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q},{"itemIdentifier":""}]}`, ev.Records[0].MessageId)
		}},
		{"a record of the batch and one of another batch", func(ev events.SQSEvent) string {
			return fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q},{"itemIdentifier":"an-earlier-batch's-record"}]}`, ev.Records[0].MessageId)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := h.queue(false, nil)
			h.send(url, "a", "b")
			inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) { return []byte(tc.respond(ev)), nil }}
			w := &warnings{}
			// One poller: each record is counted once (see oneAtATime).
			s, err := runUntilEmpty(t, client, url, oneAtATime{inv}, w, func(o *esm.Options) { o.BatchSize = 1 })
			if err != nil {
				t.Fatal(err)
			}
			// As on AWS: without ReportBatchItemFailures the response is not
			// read, and every record is deleted.
			if s.Deleted != 2 || s.Left != 0 {
				t.Errorf("summary %+v; want both records deleted", s)
			}
			if n := w.containing("batchItemFailures"); n != 1 {
				t.Errorf("warned of ignored batchItemFailures %d times; want once: the function named a record of its batch failed, and it was deleted\nwarnings: %q", n, w.msgs)
			}
		})
	}
}

// With a batching window longer than the queue's visibility timeout, a
// record received at the start of the window waits in its batch while its
// visibility timeout runs out, and is handed out again before the window
// closes: to the same poller, which puts it in the same event a second
// time (capacity 1, as with a Runner), or to other pollers, each of which
// invokes it (capacity unknown: five pollers). Lambda accepts such a
// mapping (only the function's timeout is checked). Run warns of it, and
// an event never holds a message twice.
func TestWindowLongerThanVisibilityTimeout(t *testing.T) {
	for _, capacity := range []int{0, 1} {
		t.Run(fmt.Sprintf("capacity %d", capacity), func(t *testing.T) {
			// Each waits out its 7 s window on a queue of its own.
			t.Parallel()
			testWindowLongerThanVisibility(t, capacity)
		})
	}
}

// oneAtATime is a funcInvoker that says it serves one invocation at a time,
// as a Runner does: Run then polls with one poller, whose receives never
// overlap. A test that counts each message once uses it: moto's
// ReceiveMessage takes no lock, and two receives at once can both hand out
// the same message, which SQS's visibility timeout rules out.
type oneAtATime struct{ *funcInvoker }

func (oneAtATime) Capacity() int { return 1 }

func testWindowLongerThanVisibility(t *testing.T, capacity int) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	// 3 s is six times the function's 500 ms: no warning is due, and the
	// 7 s window is more than twice the visibility timeout.
	url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "3"})
	h.send(url, "a")
	var mu sync.Mutex
	var events_ [][]string
	inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
		var ids []string
		for _, r := range ev.Records {
			ids = append(ids, r.MessageId)
		}
		mu.Lock()
		events_ = append(events_, ids)
		mu.Unlock()
		return []byte(`{}`), nil
	}}
	var invoker esm.Invoker = inv
	if capacity == 1 {
		invoker = oneAtATime{inv}
	}
	w := &warnings{}
	s, err := runUntilEmpty(t, client, url, invoker, w, func(o *esm.Options) {
		o.BatchSize, o.Window, o.FunctionTimeout = 20, 7*time.Second, 500*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Where several pollers may take the message again, that is the race
	// the warning is about; one poller never invokes it twice.
	if capacity == 1 && len(events_) != 1 {
		t.Errorf("%d invocations for one message: %v (warnings %q)", len(events_), events_, w.msgs)
	}
	if n := w.containing("batching window"); n != 1 {
		t.Errorf("warned of the window %d times; want once: %q", n, w.msgs)
	}
	for _, ids := range events_ {
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(ids) {
			t.Errorf("an event holds a message twice: %v (warnings %q)", ids, w.msgs)
		}
	}
	if s.Records != s.Deleted+s.Left {
		t.Errorf("summary %+v: Records %d != Deleted %d + Left %d", s, s.Records, s.Deleted, s.Left)
	}
	if s.DeleteFailures != 0 {
		t.Errorf("summary %+v: a delete failed, though the message was deleted", s)
	}
	b, _ := json.Marshal(s)
	t.Logf("summary %s; events %v; warnings %q", b, events_, w.msgs)
}

// With the new default of five batches in flight, five receives run at
// once against a FIFO queue. Each group's records must still reach the
// function one batch at a time and in the order they were sent.
func TestFIFOOrderWithDefaultConcurrency(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "30"})
	const perGroup = 15
	groups := []string{"A", "B", "C"}
	for i := range perGroup {
		for _, g := range groups {
			h.sendFIFO(url, g, fmt.Sprintf("%s%02d", g, i))
		}
	}
	var mu sync.Mutex
	done := map[string][]string{}
	busy := map[string]bool{}
	var overlaps []string
	inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
		mu.Lock()
		var mine []string
		for _, r := range ev.Records {
			g := r.Attributes["MessageGroupId"]
			if busy[g] && !slices.Contains(mine, g) {
				overlaps = append(overlaps, r.Body)
			}
			if !slices.Contains(mine, g) {
				mine = append(mine, g)
			}
			busy[g] = true
			done[g] = append(done[g], r.Body)
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		for _, g := range mine {
			busy[g] = false
		}
		mu.Unlock()
		return []byte(`{}`), nil
	}}
	w := &warnings{}
	s, err := runUntilEmpty(t, client, url, inv, w, func(o *esm.Options) { o.BatchSize = 2 })
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range groups {
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf("%s%02d", g, i))
		}
		if !slices.Equal(done[g], want) {
			t.Errorf("group %s done in order %v; want %v", g, done[g], want)
		}
	}
	if len(overlaps) > 0 {
		t.Errorf("records given while their group was in another batch: %v", overlaps)
	}
	if s.Records != s.Deleted+s.Left || s.Deleted != perGroup*len(groups) {
		t.Errorf("summary %+v", s)
	}
}

// attrDropper is an SQS endpoint whose GetQueueAttributes leaves out the
// queue's VisibilityTimeout.
type attrDropper struct{ *sqs.Client }

func (c attrDropper) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := c.Client.GetQueueAttributes(ctx, in, optFns...)
	if out != nil {
		delete(out.Attributes, "VisibilityTimeout")
	}
	return out, err
}

// Run refuses a queue whose visibility timeout is below the function's
// timeout. When the endpoint does not say what the visibility timeout is,
// the check cannot be made; Run must not pass over that in silence.
func TestVisibilityCheckWithoutTheAttribute(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "1"})
	h.send(url, "a")
	w := &warnings{}
	_, err := runUntilEmptyWith(t, attrDropper{client}, url, &funcInvoker{fn: func(events.SQSEvent) ([]byte, error) { return nil, nil }}, w,
		func(o *esm.Options) { o.FunctionTimeout = 5 * time.Second })
	if err == nil && w.containing("VisibilityTimeout") == 0 {
		t.Errorf("a 5s function mapped to a queue whose VisibilityTimeout went unread: no error, no warning (warnings %q)", w.msgs)
	}
}

// runUntilEmptyWith is runUntilEmpty with any Client.
func runUntilEmptyWith(t *testing.T, client esm.Client, url string, inv esm.Invoker, w *warnings, optFns ...func(*esm.Options)) (esm.Summary, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	m, err := esm.New(client, url, inv, append([]func(*esm.Options){func(o *esm.Options) {
		o.UntilEmpty, o.PollWait, o.OnWarning = true, -1, w.add
	}}, optFns...)...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop on an empty queue within 20s; summary %+v", s)
	}
	return s, err
}

// receiveWatcher counts the receives that start after the test stopped Run,
// and holds each of them a moment, as a slow network would.
type receiveWatcher struct {
	*sqs.Client
	stopped  atomic.Bool
	late     atomic.Int32
	returned chan struct{} // told, without blocking, when a receive returns
}

func (c *receiveWatcher) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if c.stopped.Load() {
		c.late.Add(1)
		time.Sleep(500 * time.Millisecond)
	}
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	select {
	case c.returned <- struct{}{}:
	default:
	}
	return out, err
}

// Stopping Run finishes the batches in flight and receives nothing after.
// With a batching window and short polls, a stop that comes while the
// poller pauses between two receives of the window is followed by one more
// receive, whose messages are then invoked.
func TestNoReceiveAfterStopInAWindow(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	url, _ := h.queue(false, nil)
	h.send(url, "before")
	var mu sync.Mutex
	var got []string
	inv := oneAtATime{&funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range ev.Records {
			got = append(got, r.Body)
		}
		return nil, nil
	}}}
	c := &receiveWatcher{Client: client, returned: make(chan struct{}, 1)}
	m, err := esm.New(c, url, inv, func(o *esm.Options) {
		o.BatchSize, o.Window, o.PollWait = 20, 5*time.Second, -1
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var s esm.Summary
	go func() {
		defer close(done)
		s, err = m.Run(ctx)
	}()
	time.Sleep(time.Second) // well inside the window
	// Stop while the poller pauses between two short polls of the window:
	// just after a receive has returned.
	select {
	case <-c.returned:
	default:
	}
	select {
	case <-c.returned:
	case <-time.After(5 * time.Second):
		t.Fatal("no receive within 5s")
	}
	time.Sleep(50 * time.Millisecond)
	c.stopped.Store(true)
	cancel()
	h.send(url, "after")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := c.late.Load(); n > 0 || slices.Contains(got, "after") {
		t.Errorf("%d receives after the stop; the function got %q; want none after it, and only %q", n, got, "before")
	}
	t.Logf("summary %+v", s)
}

// With FilterCriteria, Lambda deletes a message that matches no pattern
// without invoking the function, and invokes the others as usual; a batch
// whose every message is filtered out makes no invocation. A body that is
// not JSON matches no pattern on the body's fields.
func TestFilterDeletesMessagesItDoesNotMatch(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	filter, err := eventfilter.New(`{"body":{"type":["charge"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name            string
		bodies          []string
		wantDelivered   []string
		wantInvocations bool
	}{
		{"some kept", []string{`{"type":"charge","n":1}`, `{"type":"refund"}`, `not json`, `{"type":"charge","n":2}`},
			[]string{`{"type":"charge","n":1}`, `{"type":"charge","n":2}`}, true},
		{"every one filtered out", []string{`{"type":"refund"}`, `type=charge`}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := h.queue(false, nil)
			h.send(url, tc.bodies...)
			var mu sync.Mutex
			var delivered []string
			inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range ev.Records {
					delivered = append(delivered, r.Body)
				}
				return []byte(`{"batchItemFailures":[]}`), nil
			}}
			s := h.run(url, oneAtATime{inv}, func(o *esm.Options) { o.Filter = filter })
			slices.Sort(delivered)
			if !slices.Equal(delivered, tc.wantDelivered) {
				t.Errorf("delivered %q; want %q", delivered, tc.wantDelivered)
			}
			wantFiltered := len(tc.bodies) - len(tc.wantDelivered)
			if s.Filtered != wantFiltered || s.Deleted != len(tc.wantDelivered) || s.Left != 0 || (s.Invocations > 0) != tc.wantInvocations {
				t.Errorf("summary %+v; want %d filtered, %d deleted, none left, invoked %v", s, wantFiltered, len(tc.wantDelivered), tc.wantInvocations)
			}
			if visible, inFlight, delayed := h.counts(url); visible+inFlight+delayed != 0 {
				t.Errorf("queue holds %d visible, %d in flight, %d delayed; want every message deleted", visible, inFlight, delayed)
			}
		})
	}
}
