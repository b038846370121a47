package producer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// inProcess is an esm.Invoker that runs a BatchFunc in this process, on the
// event's JSON as Lambda would hand it over, with a 30-second deadline.
type inProcess struct{ fn lambdakit.BatchFunc }

func (p inProcess) Invoke(ctx context.Context, event []byte, _ ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	var ev events.SQSEvent
	if err := json.Unmarshal(event, &ev); err != nil {
		return runtimeapi.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := p.fn(ctx, ev)
	if err != nil {
		fe := &runtimeapi.FunctionError{Type: "errorString", Message: err.Error()}
		payload, _ := json.Marshal(fe)
		return runtimeapi.Result{Outcome: runtimeapi.OutcomeFunctionError, Error: fe, Payload: payload}, nil
	}
	payload, err := json.Marshal(resp)
	if err != nil {
		return runtimeapi.Result{}, err
	}
	return runtimeapi.Result{Outcome: runtimeapi.OutcomeSuccess, Payload: payload}, nil
}

// poisonHandler fails bodies starting with "poison" permanently and counts
// the deliveries of every body, in order.
type poisonHandler struct {
	mu  sync.Mutex
	got []string
}

func (h *poisonHandler) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	h.mu.Lock()
	h.got = append(h.got, msg.Body)
	h.mu.Unlock()
	if strings.HasPrefix(msg.Body, "poison") {
		return nil, lambdakit.Permanent(errors.New("invalid message"))
	}
	return nil, nil
}

func (h *poisonHandler) deliveries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// queueARN reads a queue's ARN.
func queueARN(t *testing.T, client *sqs.Client, url string) string {
	t.Helper()
	out, err := client.GetQueueAttributes(ctxFor(t), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// sourceAndDLQ creates a dead-letter queue and a source queue that moves a
// message there after 5 receives, as the sample's template does, with a
// visibility timeout of visibility seconds: 1 so that a failed record
// comes back at once; longer where a test counts deliveries of records
// that do not fail, which a timeout shorter than a batch takes under load
// (make test runs packages side by side) would deliver again, as SQS does.
func sourceAndDLQ(t *testing.T, client *sqs.Client, fifo bool, visibility int) (source, dlq string) {
	t.Helper()
	dlq = testenv.Queue(t, client, fifo, nil)
	policy := `{"deadLetterTargetArn":"` + queueARN(t, client, dlq) + `","maxReceiveCount":"5"}`
	source = testenv.Queue(t, client, fifo, map[string]string{"VisibilityTimeout": strconv.Itoa(visibility), "RedrivePolicy": policy})
	return source, dlq
}

// poisonAttributes are message attributes of every kind.
func poisonAttributes() map[string]types.MessageAttributeValue {
	return map[string]types.MessageAttributeValue{
		"trace-id": {DataType: aws.String("String"), StringValue: aws.String("abc-123")},
		"attempt":  {DataType: aws.String("Number"), StringValue: aws.String("3")},
		"raw":      {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 0xff}},
		"label":    {DataType: aws.String("String.origin"), StringValue: aws.String("checkout")},
	}
}

func sameAttributes(got, want map[string]types.MessageAttributeValue) bool {
	if len(got) != len(want) {
		return false
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || aws.ToString(g.DataType) != aws.ToString(w.DataType) || aws.ToString(g.StringValue) != aws.ToString(w.StringValue) || !bytes.Equal(g.BinaryValue, w.BinaryValue) {
			return false
		}
	}
	return true
}

func describeAttributes(attrs map[string]types.MessageAttributeValue) string {
	var parts []string
	for name, a := range attrs {
		parts = append(parts, fmt.Sprintf("%s=%s:%s%x", name, aws.ToString(a.DataType), aws.ToString(a.StringValue), a.BinaryValue))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// runMapping runs an event source mapping from url into fn until the queue
// is empty, bounded by 60 seconds.
func runMapping(t *testing.T, client *sqs.Client, url string, fn lambdakit.BatchFunc) esm.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := esm.New(client, url, inProcess{fn}, func(o *esm.Options) {
		o.UntilEmpty = true
		o.PollWait = -1
		o.ReportBatchItemFailures = true // as a lambdakit function's mapping is configured
		o.OnWarning = func(err error) { t.Logf("esm warning: %v", err) }
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Run(ctx)
	if err != nil {
		t.Fatalf("esm Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the queue was not empty after 60s; summary %+v", s)
	}
	return s
}

func TestDeadLetterQueueTakesPoisonAfterOneDelivery(t *testing.T) {
	client := sqsClient(t, "")
	for _, fifo := range []bool{true, false} {
		name := "standard"
		if fifo {
			name = "FIFO"
		}
		t.Run(name+": the poison message is in the DLQ as sent, and its group goes on", func(t *testing.T) {
			source, dlq := sourceAndDLQ(t, client, fifo, 30)
			send := func(body string, attrs map[string]types.MessageAttributeValue) string {
				in := &sqs.SendMessageInput{QueueUrl: aws.String(source), MessageBody: aws.String(body), MessageAttributes: attrs}
				if fifo {
					in.MessageGroupId, in.MessageDeduplicationId = aws.String("cus_A"), aws.String(producer.DedupID(body))
				}
				out, err := client.SendMessage(ctxFor(t), in)
				if err != nil {
					t.Fatal(err)
				}
				return aws.ToString(out.MessageId)
			}
			before := send("before", nil)
			poisonID := send("poison: amount is not a number", poisonAttributes())
			send("after", nil)

			h := &poisonHandler{}
			logs := &lambdakittest.LogBuffer{}
			fn := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
				o.DeadLetters = producer.NewDeadLetterQueue(client, dlq)
				o.Logger = logs.Logger()
			})
			runMapping(t, client, source, fn)

			got := h.deliveries()
			if n := slices.Index(got, "poison: amount is not a number"); n < 0 || slices.Index(got[n+1:], got[n]) >= 0 {
				t.Errorf("deliveries %q; want the poison message delivered exactly once", got)
			}
			if fifo && !slices.Equal(got, []string{"before", "poison: amount is not a number", "after"}) {
				t.Errorf("deliveries %q; want the group in order, each once", got)
			}
			dead := testenv.Drain(t, client, dlq)
			if len(dead) != 1 {
				t.Fatalf("the DLQ holds %d messages (%q); want the poison message only", len(dead), bodies(dead))
			}
			m := dead[0]
			if body := aws.ToString(m.Body); body != "poison: amount is not a number" {
				t.Errorf("DLQ body %q; want the original", body)
			}
			if !sameAttributes(m.MessageAttributes, poisonAttributes()) {
				t.Errorf("DLQ message attributes {%s}; want {%s}", describeAttributes(m.MessageAttributes), describeAttributes(poisonAttributes()))
			}
			group, dedup := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]
			switch {
			case fifo && (group != "cus_A" || dedup != producer.DedupID(poisonID)):
				t.Errorf("DLQ group %q, dedup ID %q; want cus_A and DedupID(message ID) %q", group, dedup, producer.DedupID(poisonID))
			case !fifo && (group != "" || dedup != ""):
				t.Errorf("DLQ group %q, dedup ID %q; want none on a standard queue", group, dedup)
			}
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(l, before) && !strings.Contains(l, `"outcome":"processed"`) {
					t.Errorf("the message that succeeded has a line other than its done line: %s", l)
				}
			}
			if !strings.Contains(logs.String(), `"messageId":"`+poisonID+`"`) || !strings.Contains(logs.String(), "sent to the dead-letter queue") {
				t.Errorf("logs do not tell that %s went to the dead-letter queue:\n%s", poisonID, logs.String())
			}
		})
	}
}

func TestDeadLetterQueueSendFailureFallsBackToRedelivery(t *testing.T) {
	client := sqsClient(t, "")
	source, dlq := sourceAndDLQ(t, client, true, 1)
	proxy := testenv.NewProxy(t, moto.Server(t).URL)
	// Every attempt of the first SendMessage call fails (the test config
	// makes 3); the next call goes through.
	proxy.Answer("SendMessage", 3, 500, `{"__type":"com.amazonaws.sqs#InternalError","message":"injected by the test proxy"}`)
	_, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{
		QueueUrl: aws.String(source), MessageBody: aws.String("poison"), MessageAttributes: poisonAttributes(),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &poisonHandler{}
	logs := &lambdakittest.LogBuffer{}
	fn := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.DeadLetters = producer.NewDeadLetterQueue(sqsClient(t, proxy.URL), dlq)
		o.Logger = logs.Logger()
		o.AllowAllFailed = true
	})
	s := runMapping(t, client, source, fn)

	if got := h.deliveries(); !slices.Equal(got, []string{"poison", "poison"}) {
		t.Errorf("deliveries %q; want 2: the first send failed, so the message came back", got)
	}
	if s.ItemFailures != 1 || s.Deleted != 1 {
		t.Errorf("summary %+v; want 1 record failed, then 1 deleted", s)
	}
	if n := proxy.Count("SendMessage"); n != 4 {
		t.Errorf("SendMessage reached the proxy %d times; want 4 (3 failed attempts, then 1)", n)
	}
	if !strings.Contains(logs.String(), "sending it to the dead-letter queue failed") {
		t.Errorf("logs do not give the send's failure:\n%s", logs.String())
	}
	dead := testenv.Drain(t, client, dlq)
	if len(dead) != 1 || aws.ToString(dead[0].Body) != "poison" || !sameAttributes(dead[0].MessageAttributes, poisonAttributes()) {
		t.Fatalf("the DLQ holds %q; want the poison message once, with its attributes", bodies(dead))
	}
}

func TestDeadLetterQueueRefusesWhatItCannotSend(t *testing.T) {
	client := sqsClient(t, "")
	dlq := testenv.Queue(t, client, true, nil)
	q := producer.NewDeadLetterQueue(client, dlq)
	noGroup := lambdakittest.Message("x")
	if err := q.SendDeadLetter(ctxFor(t), &noGroup, nil); !errors.Is(err, producer.ErrNotDeadLettered) {
		t.Errorf("a message without a group to a FIFO queue: %v; want ErrNotDeadLettered", err)
	}
	noID := lambdakittest.Message("x", lambdakittest.InGroup("g"))
	noID.MessageId = ""
	if err := q.SendDeadLetter(ctxFor(t), &noID, nil); !errors.Is(err, producer.ErrNotDeadLettered) {
		t.Errorf("a message without an ID: %v; want ErrNotDeadLettered", err)
	}
	if got := testenv.Drain(t, client, dlq); len(got) != 0 {
		t.Errorf("the DLQ holds %d messages; want none", len(got))
	}
	// The same message twice (a redelivery of one that was sent) is one
	// message in a FIFO DLQ; two messages are two, whatever their keys.
	m := lambdakittest.Message(`{"payment_id":"pay_1"}`, lambdakittest.InGroup("g"))
	other := lambdakittest.Message(`{"payment_id":"pay_1"}`, lambdakittest.InGroup("g"))
	for _, msg := range []events.SQSMessage{m, lambdakittest.Redelivery(m), other} {
		if err := q.SendDeadLetter(ctxFor(t), &msg, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := testenv.Drain(t, client, dlq); len(got) != 2 {
		t.Errorf("the DLQ holds %d messages; want 2 (the redelivery deduplicated, the other message kept)", len(got))
	}
}

// Several invocations at once in one process: the dead letter carries the
// trace of the invocation that sent it, from its context.
func TestDeadLetterQueueSendsTheInvocationTraceHeader(t *testing.T) {
	const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	client, sent := tracedClient(t)
	dlq := testenv.Queue(t, client, false, nil)
	msg := &events.SQSMessage{MessageId: "m-1", Body: "poison"}
	if err := producer.NewDeadLetterQueue(client, dlq).SendDeadLetter(invocationCtx(t, header), msg, errors.New("bad")); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) == 0 || got[len(got)-1] != header {
		t.Errorf("X-Amzn-Trace-Id sent: %q; want the invocation's %q on SendMessage", got, header)
	}
}
