package esm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// These tests hold the mapping to what Lambda's SQS event source mapping
// does where a local run could otherwise pass code that fails on AWS. The
// function is in process (funcInvoker): what is checked is the mapping,
// against a real queue on moto_server.

// funcInvoker runs fn as the function, any number of invocations at once,
// and counts how many ran at the same time.
type funcInvoker struct {
	fn func(ev events.SQSEvent) ([]byte, error)

	mu             sync.Mutex
	inFlight, most int
	invocations    int
}

func (f *funcInvoker) Invoke(ctx context.Context, event []byte, _ ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	f.mu.Lock()
	f.inFlight++
	f.invocations++
	f.most = max(f.most, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	var ev events.SQSEvent
	if err := json.Unmarshal(event, &ev); err != nil {
		return runtimeapi.Result{}, err
	}
	payload, err := f.fn(ev)
	if err != nil {
		return runtimeapi.Result{}, err
	}
	return runtimeapi.Result{RequestID: fmt.Sprint(time.Now().UnixNano()), Outcome: runtimeapi.OutcomeSuccess, Payload: payload}, nil
}

func (f *funcInvoker) counts() (most, invocations int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most, f.invocations
}

// warnings collects what Run warns of.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) add(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, err.Error())
}

func (w *warnings) containing(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// runUntilEmpty runs a mapping with opts until the queue is empty, bounded
// by 20 s, and returns its summary and error.
func runUntilEmpty(t *testing.T, client *sqs.Client, url string, inv esm.Invoker, w *warnings, optFns ...func(*esm.Options)) (esm.Summary, error) {
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

func TestMappingFollowsLambda(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	h := newHarness(t, client, "")
	succeed := func(events.SQSEvent) ([]byte, error) { return []byte(`{}`), nil }

	t.Run("five batches at a time by default, as Lambda starts a standard queue", func(t *testing.T) {
		url, _ := h.queue(false, nil)
		for i := range 20 {
			h.send(url, fmt.Sprintf("m%d", i))
		}
		inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
			time.Sleep(300 * time.Millisecond)
			return []byte(`{}`), nil
		}}
		s, err := runUntilEmpty(t, client, url, inv, &warnings{}, func(o *esm.Options) { o.BatchSize = 1 })
		if err != nil {
			t.Fatal(err)
		}
		if most, _ := inv.counts(); most != esm.DefaultConcurrency || esm.DefaultConcurrency != 5 {
			t.Errorf("at most %d batches ran at once (DefaultConcurrency %d); want 5, as Lambda starts", most, esm.DefaultConcurrency)
		}
		// A standard queue may deliver a message twice (moto does, now and
		// then, to concurrent receives), as SQS may.
		if s.Deleted < 20 || s.Left != 0 {
			t.Errorf("summary %+v; want all 20 deleted", s)
		}
	})

	t.Run("batchItemFailures are ignored by default, and said so once", func(t *testing.T) {
		url, _ := h.queue(false, nil)
		ids := h.send(url, "a", "b", "c", "d")
		inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
			return json.Marshal(events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}})
		}}
		w := &warnings{}
		s, err := runUntilEmpty(t, client, url, inv, w, func(o *esm.Options) { o.BatchSize = 1 })
		if err != nil {
			t.Fatal(err)
		}
		// On AWS, without ReportBatchItemFailures the response is not read:
		// every record of a successful invocation is deleted.
		if s.Deleted < len(ids) || s.Left != 0 || s.ItemFailures != 0 {
			t.Errorf("summary %+v; want all %d deleted, none left", s, len(ids))
		}
		if n := w.containing("batchItemFailures"); n != 1 {
			t.Errorf("warned of ignored batchItemFailures %d times; want once\n%v", n, w.msgs)
		}
	})

	t.Run("batchItemFailures are honoured with ReportBatchItemFailures", func(t *testing.T) {
		url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "1"})
		h.send(url, "a", "b")
		var mu sync.Mutex
		seen := map[string]int{}
		inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			var failed []events.SQSBatchItemFailure
			for _, r := range ev.Records {
				if seen[r.Body]++; r.Body == "a" && seen[r.Body] == 1 {
					failed = append(failed, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
				}
			}
			return json.Marshal(events.SQSEventResponse{BatchItemFailures: failed})
		}}
		w := &warnings{}
		// One poller: each delivery is counted once (see oneAtATime).
		s, err := runUntilEmpty(t, client, url, oneAtATime{inv}, w, func(o *esm.Options) { o.ReportBatchItemFailures = true })
		if err != nil {
			t.Fatal(err)
		}
		if s.ItemFailures != 1 || s.Deleted != 2 || seen["a"] != 2 {
			t.Errorf("summary %+v, deliveries %v; want a failed once and delivered again", s, seen)
		}
		if n := w.containing("batchItemFailures"); n != 0 {
			t.Errorf("warned of ignored batchItemFailures with ReportBatchItemFailures on: %v", w.msgs)
		}
	})

	// "Handling errors for an SQS event source" (Implementing partial batch
	// responses): on a FIFO queue the function itself should name every
	// record after its first failure; Lambda deletes every record not named,
	// even a later one of the failed record's group, and the group's order
	// is then lost on AWS. The mapping must do the same, so that a function
	// that names only the failed record loses order locally too, rather
	// than passing here and reordering on AWS.
	t.Run("FIFO: a later record of a failed record's group is deleted unless named", func(t *testing.T) {
		url, _ := h.queue(true, map[string]string{"VisibilityTimeout": "1"})
		for _, b := range []string{"g1", "g2", "g3"} {
			h.sendFIFO(url, "g", b)
		}
		var mu sync.Mutex
		var order []string
		inv := &funcInvoker{fn: func(ev events.SQSEvent) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			var failed []events.SQSBatchItemFailure
			for _, r := range ev.Records {
				order = append(order, r.Body)
				if r.Body == "g2" && r.Attributes["ApproximateReceiveCount"] == "1" {
					failed = append(failed, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
				}
			}
			return json.Marshal(events.SQSEventResponse{BatchItemFailures: failed})
		}}
		s, err := runUntilEmpty(t, client, url, inv, &warnings{}, func(o *esm.Options) { o.ReportBatchItemFailures = true })
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"g1", "g2", "g3", "g2"}; !slices.Equal(order, want) || s.ItemFailures != 1 || s.Deleted != 3 {
			t.Errorf("deliveries %q, summary %+v; want %q: g3 deleted in the first batch, g2 alone delivered again", order, s, want)
		}
	})

	t.Run("a visibility timeout below the function's timeout is refused", func(t *testing.T) {
		url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "2"})
		h.send(url, "a")
		inv := &funcInvoker{fn: succeed}
		_, err := runUntilEmpty(t, client, url, inv, &warnings{}, func(o *esm.Options) { o.FunctionTimeout = 5 * time.Second })
		var oe *esm.OptionError
		if !errors.Is(err, esm.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Option != "FunctionTimeout" {
			t.Errorf("Run error = %v; want an OptionError about FunctionTimeout", err)
		}
		if _, n := inv.counts(); n != 0 {
			t.Errorf("%d invocations; want none", n)
		}
	})

	t.Run("a short visibility timeout runs when allowed, with a warning", func(t *testing.T) {
		url, _ := h.queue(false, map[string]string{"VisibilityTimeout": "2"})
		h.send(url, "a")
		w := &warnings{}
		// One poller: the message is counted once (see oneAtATime).
		s, err := runUntilEmpty(t, client, url, oneAtATime{&funcInvoker{fn: succeed}}, w, func(o *esm.Options) {
			o.FunctionTimeout, o.AllowShortVisibilityTimeout = 5*time.Second, true
		})
		if err != nil || s.Deleted != 1 {
			t.Fatalf("Run = %+v, %v; want the message deleted", s, err)
		}
		if n := w.containing("VisibilityTimeout (2s) is shorter than the function's timeout"); n != 1 {
			t.Errorf("got warnings %v; want one about the short visibility timeout", w.msgs)
		}
	})

	t.Run("below six times the function's timeout is a warning", func(t *testing.T) {
		for _, tc := range []struct {
			visibility string
			warnings   int
		}{{"10", 1}, {"29", 1}, {"30", 0}, {"60", 0}} {
			url, _ := h.queue(false, map[string]string{"VisibilityTimeout": tc.visibility})
			h.send(url, "a")
			w := &warnings{}
			if _, err := runUntilEmpty(t, client, url, &funcInvoker{fn: succeed}, w, func(o *esm.Options) { o.FunctionTimeout = 5 * time.Second }); err != nil {
				t.Fatalf("VisibilityTimeout %s: %v", tc.visibility, err)
			}
			if n := w.containing("six times"); n != tc.warnings {
				t.Errorf("VisibilityTimeout %s with a 5s function: %d warnings about six times; want %d\n%v", tc.visibility, n, tc.warnings, w.msgs)
			}
		}
	})
}
