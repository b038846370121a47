package producer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// gatewayDown fails bodies starting with "fail" (transient) or "perm"
// (permanent).
var gatewayDown = lambdakit.HandlerFunc(func(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
	switch {
	case strings.HasPrefix(msg.Body, "perm"):
		return nil, lambdakit.Permanent(errors.New("card expired"))
	case strings.HasPrefix(msg.Body, "fail"):
		return nil, errors.New("gateway down")
	}
	return nil, nil
})

// receiveEvent sends bodies to the queue and receives them as Lambda's
// poller would, hidden for the queue's own visibility timeout.
func receiveEvent(t *testing.T, client *sqs.Client, url string, bodies ...string) events.SQSEvent {
	t.Helper()
	arn := queueARN(t, client, url)
	for _, b := range bodies {
		if _, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var ev events.SQSEvent
	at := map[string]int{} // a message's place in ev, by ID
	for range 10 {
		out, err := client.ReceiveMessage(ctxFor(t), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			rec := asEvent(m, arn)
			rec.ReceiptHandle = aws.ToString(m.ReceiptHandle)
			if i, ok := at[rec.MessageId]; ok {
				// Received again: on a loaded machine the queue's
				// short timeout can pass before the last receive.
				// Its newest receipt is the one that counts.
				ev.Records[i] = *rec
				continue
			}
			at[rec.MessageId] = len(ev.Records)
			ev.Records = append(ev.Records, *rec)
		}
		if len(ev.Records) == len(bodies) {
			return ev
		}
	}
	t.Fatalf("received %d of %d messages", len(ev.Records), len(bodies))
	return ev
}

// visibleBodies receives what is visible now, and hides it again for a
// minute so that later looks do not see it.
func visibleBodies(t *testing.T, client *sqs.Client, url string) []string {
	t.Helper()
	out, err := client.ReceiveMessage(ctxFor(t), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60})
	if err != nil {
		t.Fatal(err)
	}
	got := bodies(out.Messages)
	slices.Sort(got)
	return got
}

// untilVisible polls, every 100 ms and for at most limit, until a message is
// visible, and returns its body and how long that took.
func untilVisible(t *testing.T, client *sqs.Client, url string, limit time.Duration) ([]string, time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if got := visibleBodies(t, client, url); len(got) > 0 {
			return got, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nothing visible after %v", limit)
	return nil, 0
}

func TestQueueVisibilityDelaysTransientFailuresOnly(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1"})
	ev := receiveEvent(t, client, url, "fail-1", "perm-1")
	log := &lambdakittest.LogBuffer{}
	// Floor 3 s, jitter window 1 s on the first receive: a delay of 3 or
	// 4 s (whole seconds); the queue's own timeout is 1 s.
	b := lambdakit.Batch(gatewayDown, func(o *lambdakit.BatchOptions) {
		o.Logger = log.Logger()
		o.AllowAllFailed = true
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(client, url), Floor: 3 * time.Second, Base: time.Second,
			Cap: 4 * time.Second, Rand: rand.New(rand.NewPCG(30, 30))}
	})
	answered := time.Now()
	if _, err := b(ctxFor(t), ev); err != nil {
		t.Fatal(err)
	}
	var delay time.Duration
	for _, line := range log.Lines(t) {
		if s, ok := line["retryInSeconds"].(float64); ok {
			delay = time.Duration(s) * time.Second
		}
	}
	if delay < 3*time.Second || delay > 4*time.Second {
		t.Fatalf("logged delay %v; want 3s or 4s", delay)
	}
	// The permanent failure comes back at the queue's own 1 s.
	if got, _ := untilVisible(t, client, url, 3*time.Second); !slices.Equal(got, []string{"perm-1"}) {
		t.Fatalf("first back: %q; want the permanent failure alone", got)
	}
	got, _ := untilVisible(t, client, url, delay+2*time.Second)
	if back := time.Since(answered); !slices.Equal(got, []string{"fail-1"}) || back < delay-500*time.Millisecond {
		t.Errorf("then back: %q after %v; want the transient failure after its %v", got, back, delay)
	}
}

// perEntrySQS answers ChangeMessageVisibilityBatch as SQS does for an entry
// it refuses: the call succeeds, and names that entry in Failed. Moto
// instead refuses the whole call for one stale receipt handle (and takes
// many an old one), so the stale entries are left out of moto's call and
// answered here, as SQS would.
type perEntrySQS struct {
	client *sqs.Client
	stale  map[string]bool
	mu     sync.Mutex
	sizes  []int
}

func (p *perEntrySQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	p.mu.Lock()
	p.sizes = append(p.sizes, len(in.Entries))
	p.mu.Unlock()
	fwd := *in
	fwd.Entries = nil
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if p.stale[aws.ToString(e.ReceiptHandle)] {
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"),
				Message: aws.String("The receipt handle has expired."), SenderFault: true})
			continue
		}
		fwd.Entries = append(fwd.Entries, e)
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	if len(fwd.Entries) > 0 {
		var err error
		if out, err = p.client.ChangeMessageVisibilityBatch(ctx, &fwd, optFns...); err != nil {
			return nil, err
		}
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func TestQueueVisibilityRefusedEntryLoggedNotFatal(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1"})
	ev := receiveEvent(t, client, url, "fail-stale", "fail-fresh")
	stale := ev.Records[0]
	sqsLike := &perEntrySQS{client: client, stale: map[string]bool{stale.ReceiptHandle: true}}
	log := &lambdakittest.LogBuffer{}
	b := lambdakit.Batch(gatewayDown, func(o *lambdakit.BatchOptions) {
		o.Logger = log.Logger()
		o.AllowAllFailed = true
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(sqsLike, url), Floor: 10 * time.Second, Cap: 10 * time.Second}
	})
	resp, err := b(ctxFor(t), ev)
	if err != nil || len(resp.BatchItemFailures) != 2 {
		t.Fatalf("got %v, %v; want both records reported failed, no error", resp, err)
	}
	for _, line := range log.Lines(t) {
		refusal, _ := line["retryNotDelayed"].(string)
		if refused := line["messageId"] == stale.MessageId; refused != strings.Contains(refusal, "ReceiptHandleIsInvalid") {
			t.Errorf("line %v: retryNotDelayed %q; want the refusal on the stale record's line alone", line, refusal)
		}
	}
	// The stale one is left to the queue's 1 s; the other waits 10 s.
	if got, _ := untilVisible(t, client, url, 3*time.Second); !slices.Equal(got, []string{"fail-stale"}) {
		t.Errorf("back: %q; want the refused record alone", got)
	}
}

func TestQueueVisibilityCallsOfAtMostTen(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1"})
	var bodies []string
	for i := range 27 {
		bodies = append(bodies, fmt.Sprintf("fail-%02d", i))
	}
	ev := receiveEvent(t, client, url, bodies...)
	counting := &perEntrySQS{client: client}
	b := lambdakit.Batch(gatewayDown, func(o *lambdakit.BatchOptions) {
		o.Logger = lambdakittest.Logger(t)
		o.AllowAllFailed = true
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(counting, url), Floor: 10 * time.Second, Cap: 10 * time.Second}
	})
	if _, err := b(ctxFor(t), ev); err != nil {
		t.Fatal(err)
	}
	slices.Sort(counting.sizes)
	if !slices.Equal(counting.sizes, []int{7, 10, 10}) {
		t.Errorf("got calls of %v entries; want 7, 10, 10", counting.sizes)
	}
	time.Sleep(1500 * time.Millisecond) // past the queue's own timeout
	if got := visibleBodies(t, client, url); len(got) != 0 {
		t.Errorf("visible after the queue's timeout: %q; want all 27 delayed", got)
	}
}

// flaky fails each body starting with "fail" on its first two deliveries,
// and records the bodies that succeed, in order.
type flaky struct {
	mu    sync.Mutex
	tries map[string]int
	done  []string
}

func (f *flaky) Handle(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries[msg.Body]++
	if strings.HasPrefix(msg.Body, "fail") && f.tries[msg.Body] <= 2 {
		return nil, errors.New("gateway down")
	}
	f.done = append(f.done, msg.Body)
	return nil, nil
}

func TestQueueVisibilityKeepsFIFOGroupInOrder(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, true, map[string]string{"VisibilityTimeout": "1"})
	for _, b := range []string{"fail-a1", "a2", "a3"} {
		_, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b),
			MessageGroupId: aws.String("cus_A"), MessageDeduplicationId: aws.String(b)})
		if err != nil {
			t.Fatal(err)
		}
	}
	h := &flaky{tries: map[string]int{}}
	fn := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = lambdakittest.Logger(t)
		o.AllowAllFailed = true
		// Delays of 1 to 2 s; the records skipped behind the failed one
		// keep the queue's 1 s, and SQS holds them while it is hidden.
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(client, url), Floor: time.Second, Cap: 2 * time.Second,
			Rand: rand.New(rand.NewPCG(1, 1))}
	})
	runMapping(t, client, url, fn)
	if !slices.Equal(h.done, []string{"fail-a1", "a2", "a3"}) || h.tries["fail-a1"] != 3 {
		t.Errorf("done %q, first tried %d times; want the group in order after 3 tries", h.done, h.tries["fail-a1"])
	}
}

// The local event source mapping uses the real queue, so it honours the
// function's visibility changes: the failed message comes back after its
// delay, not the queue's 1 s; the summary counts it delayed; and the run,
// until empty, says it is waiting rather than looking stuck.
func TestMappingHonoursBackoff(t *testing.T) {
	client := sqsClient(t, "")
	source, dlq := sourceAndDLQ(t, client, false, 1) // visibility 1 s, maxReceiveCount 5
	if _, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(source), MessageBody: aws.String("fail-1")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	h := &flaky{tries: map[string]int{}}
	timed := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return h.Handle(ctx, msg)
	})
	fn := lambdakit.Batch(timed, func(o *lambdakit.BatchOptions) {
		o.Logger = lambdakittest.Logger(t)
		o.AllowAllFailed = true
		// Delays of 3 to 4 s: later than the queue's 1 s by more than
		// the mapping's 1 s of slack.
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(client, source), Floor: 3 * time.Second, Base: time.Second,
			Cap: 4 * time.Second, Rand: rand.New(rand.NewPCG(2, 2))}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var waits []int
	m, err := esm.New(client, source, inProcess{fn}, func(o *esm.Options) {
		o.UntilEmpty = true
		o.PollWait = -1
		o.ReportBatchItemFailures = true
		o.OnWaiting = func(hidden int) { waits = append(waits, hidden) }
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Run(ctx)
	if err != nil || !s.Empty {
		t.Fatalf("Run: %v, summary %+v; want the queue emptied", err, s)
	}
	if len(at) != 3 || at[1].Sub(at[0]) < 3*time.Second || at[2].Sub(at[1]) < 3*time.Second {
		t.Errorf("deliveries at %v; want 3, each retry at least 3 s after the last", at)
	}
	if s.Delayed != 2 || s.Deleted != 1 || s.ToDeadLetterQueue != 0 {
		t.Errorf("summary %+v; want 2 delayed, 1 deleted, none to the DLQ", s)
	}
	if len(waits) < 2 || waits[0] != 1 {
		t.Errorf("told of waiting %v; want once per delay, 1 message hidden", waits)
	}
	if got := testenv.Drain(t, client, dlq); len(got) != 0 {
		t.Errorf("the DLQ holds %d messages; want none", len(got))
	}
}

// outageRun sends payments to a fresh queue (visibility 1 s, maxReceiveCount
// 5, as the sample's template at a 360th of the time), runs the mapping
// with a gateway down for the first outage, and returns how many messages
// reached the DLQ and how often each payment was charged.
func outageRun(t *testing.T, client *sqs.Client, payments int, outage time.Duration, backoff *lambdakit.Backoff) (dead int, charged map[string]int) {
	t.Helper()
	source, dlq := sourceAndDLQ(t, client, false, 1)
	for i := range payments {
		body := fmt.Sprintf(`{"payment_id":"pay_%d"}`, i)
		if _, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(source), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	charged = map[string]int{}
	up := time.Now().Add(outage)
	gateway := lambdakit.HandlerFunc(func(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
		if time.Now().Before(up) {
			return nil, errors.New("gateway: 503")
		}
		mu.Lock()
		charged[msg.Body]++
		mu.Unlock()
		return nil, nil
	})
	h := lambdakit.Chain(gateway, lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) { o.Logger = lambdakittest.Logger(t) }))
	fn := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = lambdakittest.Logger(t)
		o.AllowAllFailed = true
		if backoff != nil {
			bo := *backoff
			bo.Changer = producer.NewQueueVisibility(client, source)
			o.Backoff = &bo
		}
	})
	runMapping(t, client, source, fn)
	return len(testenv.Drain(t, client, dlq)), charged
}

// A gateway down for 6 visibility timeouts: without backoff every payment
// is received 5 times within it and goes to the DLQ; with a floor of 2 s
// (waits of 2 to 6 s) the 5th receive is at least 8 s after the first,
// past the outage, so none does, and each is charged once.
func TestQueueVisibilityRidesOutAnOutage(t *testing.T) {
	client := sqsClient(t, "")
	const payments, outage = 5, 6 * time.Second
	dead, charged := outageRun(t, client, payments, outage, nil)
	t.Logf("without backoff: %d of %d payments in the DLQ, %d charged", dead, payments, len(charged))
	if dead != payments || len(charged) != 0 {
		t.Errorf("without backoff: %d in the DLQ, %d charged; want all %d in the DLQ, none charged", dead, len(charged), payments)
	}
	dead, charged = outageRun(t, client, payments, outage, &lambdakit.Backoff{Floor: 2 * time.Second, Base: 2 * time.Second, Cap: 6 * time.Second,
		Rand: rand.New(rand.NewPCG(6, 6))})
	t.Logf("with backoff: %d of %d payments in the DLQ, %d charged", dead, payments, len(charged))
	if dead != 0 || len(charged) != payments {
		t.Errorf("with backoff: %d in the DLQ, %d charged; want none in the DLQ, all %d charged", dead, len(charged), payments)
	}
	for body, n := range charged {
		if n != 1 {
			t.Errorf("%s charged %d times; want once", body, n)
		}
	}
}
