package esm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The integration tests run testdata/esmfn, a real aws-lambda-go bootstrap,
// under runtimeapi.Runner, against queues on moto_server, through the real
// SDK. They share one build of the function, made by TestRun in its own
// temporary directory, and run as TestRun's subtests.

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// harness is what a subtest needs: an SQS client, the function's binary and
// a log file of its own.
type harness struct {
	t         *testing.T
	client    *sqs.Client
	bootstrap string
	log       string
	output    *logline.Buffer
}

func newHarness(t *testing.T, client *sqs.Client, bootstrap string) *harness {
	h := &harness{t: t, client: client, bootstrap: bootstrap, log: filepath.Join(t.TempDir(), "esmfn.log"), output: &logline.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("function output:\n%s", h.output.String())
		}
	})
	return h
}

// buildFunction returns testdata/esmfn, built for this machine.
func buildFunction(t *testing.T) string {
	t.Helper()
	return testenv.Build(t, "./testdata/esmfn")
}

// runner returns a Runner of the function with the given timeout, closed at
// the end of the test.
func (h *harness) runner(timeout time.Duration) *runtimeapi.Runner {
	h.t.Helper()
	r, err := runtimeapi.NewRunner(h.bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = "esmfn"
		o.Timeout = timeout
		o.Env = append(os.Environ(), "ESMFN_LOG="+h.log)
		o.Stdout, o.Stderr = h.output, h.output
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { r.Close() })
	return r
}

// run runs a mapping from url to inv until the queue is empty, bounded by
// 20 seconds, and fails the test on an error. It polls without waiting (the
// tests would otherwise spend most of their time in the last, empty long
// poll) unless optFns set PollWait.
func (h *harness) run(url string, inv esm.Invoker, optFns ...func(*esm.Options)) esm.Summary {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := h.runCtx(ctx, url, inv, append([]func(*esm.Options){func(o *esm.Options) { o.UntilEmpty = true }}, optFns...)...)
	if err != nil {
		h.t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		h.t.Fatalf("Run did not stop on an empty queue within 20s; summary %+v", s)
	}
	return s
}

func (h *harness) runCtx(ctx context.Context, url string, inv esm.Invoker, optFns ...func(*esm.Options)) (esm.Summary, error) {
	h.t.Helper()
	// The function answers with partial batch responses, and its mapping
	// reads them, as the sample's template says.
	opts := append([]func(*esm.Options){func(o *esm.Options) {
		o.PollWait = -1
		o.ReportBatchItemFailures = true
		o.OnWarning = func(err error) { h.t.Logf("warning: %v", err) }
	}}, optFns...)
	m, err := esm.New(h.client, url, inv, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := m.Run(ctx)
	if s.Records != s.Filtered+s.Deleted+s.Left {
		h.t.Errorf("summary %+v: Records %d != Filtered %d + Deleted %d + Left %d", s, s.Records, s.Filtered, s.Deleted, s.Left)
	}
	return s, err
}

// queue creates a queue with the given attributes (a FIFO queue if fifo)
// and returns its URL and ARN.
func (h *harness) queue(fifo bool, attrs map[string]string) (url, arn string) {
	h.t.Helper()
	url = testenv.Queue(h.t, h.client, fifo, attrs)
	attr, err := h.client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return url, attr.Attributes["QueueArn"]
}

// send sends bodies to a standard queue, in order, and returns their
// message IDs.
func (h *harness) send(url string, bodies ...string) []string {
	h.t.Helper()
	var ids []string
	for _, b := range bodies {
		out, err := h.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)})
		if err != nil {
			h.t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.MessageId))
	}
	return ids
}

// sendFIFO sends body to a FIFO queue in group, deduplicated by its body.
func (h *harness) sendFIFO(url, group, body string) *sqs.SendMessageOutput {
	h.t.Helper()
	out, err := h.client.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(strconv.Itoa(len(body)) + "-" + body[:min(len(body), 40)]),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// counts returns the queue's visible, in-flight and delayed message counts.
func (h *harness) counts(url string) (visible, inFlight, delayed int) {
	h.t.Helper()
	out, err := h.client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	n := func(name string) int { v, _ := strconv.Atoi(out.Attributes[name]); return v }
	return n("ApproximateNumberOfMessages"), n("ApproximateNumberOfMessagesNotVisible"), n("ApproximateNumberOfMessagesDelayed")
}

// invocation is one invocation as the function logged it.
type invocation struct {
	RequestID  string
	PID        int
	Start, End time.Time // End is zero if the function never answered
	Raw        json.RawMessage
	Event      events.SQSEvent
	Failed     []string
}

// overlaps reports whether two invocations ran at the same time.
func (a invocation) overlaps(b invocation) bool {
	return !a.End.IsZero() && !b.End.IsZero() && a.Start.Before(b.End) && b.Start.Before(a.End)
}

// groups returns the FIFO message groups of the invocation's records.
func (a invocation) groups() []string {
	var gs []string
	for _, r := range a.Event.Records {
		if g := r.Attributes["MessageGroupId"]; !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	return gs
}

// invocations reads the function's log, in order of start.
func (h *harness) invocations() []invocation {
	h.t.Helper()
	b, err := os.ReadFile(h.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	var invs []invocation
	byID := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l struct {
			Kind      string          `json:"kind"`
			PID       int             `json:"pid"`
			RequestID string          `json:"requestId"`
			Time      int64           `json:"time"`
			Event     json.RawMessage `json:"event"`
			Failed    []string        `json:"failed"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			h.t.Fatalf("function log: %v", err)
		}
		switch l.Kind {
		case "start":
			inv := invocation{RequestID: l.RequestID, PID: l.PID, Start: time.Unix(0, l.Time), Raw: l.Event}
			if err := json.Unmarshal(l.Event, &inv.Event); err != nil {
				h.t.Fatalf("event %s: %v", l.Event, err)
			}
			byID[l.RequestID] = len(invs)
			invs = append(invs, inv)
		case "end":
			i, ok := byID[l.RequestID]
			if !ok {
				h.t.Fatalf("function log: end of %s without a start", l.RequestID)
			}
			invs[i].End, invs[i].Failed = time.Unix(0, l.Time), l.Failed
		}
	}
	if err := sc.Err(); err != nil {
		h.t.Fatal(err)
	}
	slices.SortStableFunc(invs, func(a, b invocation) int { return a.Start.Compare(b.Start) })
	return invs
}

// deliveries returns, by label (the body's first word), the
// ApproximateReceiveCount of each delivery to the function, in order.
func deliveries(invs []invocation) map[string][]string {
	got := map[string][]string{}
	for _, inv := range invs {
		for _, r := range inv.Event.Records {
			label, _, _ := strings.Cut(r.Body, " ")
			got[label] = append(got[label], r.Attributes["ApproximateReceiveCount"])
		}
	}
	return got
}
