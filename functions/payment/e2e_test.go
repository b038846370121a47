package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// The end-to-end proof of the queue path, on moto_server's SQS and DynamoDB
// through the real SDK, with the real bootstrap binary:
//
//	producer.Send  →  FIFO queue (redrive policy to a FIFO DLQ, from template.yaml)
//	               →  esm.Mapping (what `lambdakit run` runs) →  runtimeapi.Runner  →  bootstrap
//	               →  sandbox gateway, idempotency table, ledger
//
// The template's timings are scaled down so that the test takes about 40 s:
// the function times out after 10 s instead of 60, the visibility timeout is
// 12 s instead of 360 (longer than the function's timeout, as in the
// template, so that a crashed invocation's lease has ended when its message
// comes back), and maxReceiveCount is 3 instead of 5. The mapping keeps the
// template's batch size and partial batch responses, with 2 batches in
// flight instead of 5.
const (
	e2eFunctionTimeout = 10 * time.Second
	e2eVisibility      = 12 // seconds
	e2eMaxReceiveCount = 3
	e2eConcurrency     = 2
	e2eRunBound        = 110 * time.Second
	e2eCrashWaitBound  = 7 * time.Second // and never past e2eCrashBy before the batch's deadline guard
	e2eDeadlineMargin  = time.Second     // lambdakit.BatchOptions.DeadlineMargin's default
	// e2eCrashBy is the slack left between the end of the crash's wait and
	// the deadline guard: a CI run under -race on 2 busy cores once took
	// more than 500 ms from the wait's last check to the kill, and the
	// guard answered first.
	e2eCrashBy          = 1500 * time.Millisecond
	e2eFunctionName     = "lambdakit-payment-PaymentFunction"
	e2eRetrySuffix      = "|sent again after the 5-minute window"
	e2eCrashedPaymentID = "pay_A3"
)

// e2ePayment is one message the test publishes.
type e2ePayment struct {
	id, customer string
	body         string
	poison       bool // fails validation: must end in the DLQ
	declined     bool // the gateway declines it: a ledger row, no charge
}

func e2ePayments() []e2ePayment {
	ok := func(id, customer string, amount int) e2ePayment {
		return e2ePayment{id: id, customer: customer, body: body(id, customer, amount)}
	}
	poison := func(id, customer, amount, currency string) e2ePayment {
		b := fmt.Sprintf(`{"payment_id":%q,"order_id":"ord_1","customer_id":%q,"amount":%s,"currency":%q}`, id, customer, amount, currency)
		return e2ePayment{id: id, customer: customer, body: b, poison: true}
	}
	declined := ok("pay_D1", gateway.DeclinedCustomerPrefix+"_D", 500)
	declined.declined = true
	// Groups interleaved, as producers send them. Poison messages are alone
	// in their group or last in it, so that no valid payment waits behind
	// them and follows them to the DLQ. The crash hits pay_A3, the last of
	// group A (see the moto note in the test).
	return []e2ePayment{
		ok("pay_A1", "cus_A", 101), ok("pay_B1", "cus_B", 201), ok("pay_C1", "cus_C", 301), declined, ok("pay_E1", "cus_E", 501),
		ok("pay_A2", "cus_A", 102), ok("pay_B2", "cus_B", 202), ok("pay_C2", "cus_C", 302), poison("pay_P1", "cus_P", "1000", "euro"), ok("pay_E2", "cus_E", 502),
		ok("pay_A3", "cus_A", 103), ok("pay_B3", "cus_B", 203), poison("pay_C3", "cus_C", "0", "EUR"),
	}
}

// TestEndToEndThroughTheQueue publishes payments of several customers, a
// payment sent again with another deduplication ID (a producer's retry after
// SQS's 5-minute window) and poison messages; runs the event source mapping
// until the queue is empty, killing the function once after the gateway has
// charged a payment and before it answers; and checks that every payment was
// charged exactly once and in order within its customer, that the poison
// messages, and nothing else, are in the DLQ, that the queue is empty, and
// that every published message is accounted for.
func TestEndToEndThroughTheQueue(t *testing.T) {
	srv := moto.Server(t)
	ctx := t.Context()
	bootstrap := testenv.Build(t, ".") // this package, the real function

	gw := &gatewayObserver{}
	f := setup(t, gw)
	gw.gw = f.gw
	sqsc := sqs.NewFromConfig(moto.Config(t))

	// The queue and its DLQ as template.yaml declares them, scaled down.
	queues, err := samtemplate.Queues(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	sqsEvents, err := samtemplate.SQSEvents(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	event, err := samtemplate.FindSQSEvent(sqsEvents, "PaymentFunction")
	if err != nil {
		t.Fatal(err)
	}
	q, err := samtemplate.FindQueue(queues, event.Queue)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := samtemplate.FindQueue(queues, q.DeadLetterQueue)
	if err != nil {
		t.Fatal(err)
	}
	if !q.FifoQueue || !dlq.FifoQueue || q.VisibilityTimeout <= event.Timeout {
		t.Fatalf("template: queue %+v, DLQ %+v, function timeout %ds; want FIFO queues and a visibility timeout above the function's", q, dlq, event.Timeout)
	}
	q.VisibilityTimeout, q.MaxReceiveCount = e2eVisibility, e2eMaxReceiveCount
	name := testenv.Name(t)
	dlqURL, err := dlq.Create(ctx, sqsc, name+"-dlq.fifo", "")
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	queueURL, err := q.Create(ctx, sqsc, name+"-queue.fifo", attrs.Attributes["QueueArn"])
	if err != nil {
		t.Fatal(err)
	}

	// Publish: everything with the consumer's key, then pay_B2 again with
	// another producer-side key, so another deduplication ID, which SQS
	// lets through as it does a retry after its 5-minute window.
	payments := e2ePayments()
	consumerKey := lambdakit.KeyFromField("payment_id")
	byCustomer := producer.GroupFromField("customer_id")
	first, err := producer.NewFromQueue(ctx, sqsc, queueURL, func(o *producer.Options) {
		o.Key, o.Group = consumerKey, byCustomer
	})
	if err != nil {
		t.Fatal(err)
	}
	later, err := producer.NewFromQueue(ctx, sqsc, queueURL, func(o *producer.Options) {
		o.Key = func(m *events.SQSMessage) (string, error) {
			k, err := consumerKey(m)
			return k + e2eRetrySuffix, err
		}
		o.Group = byCustomer
	})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []producer.Message
	for _, p := range payments {
		msgs = append(msgs, producer.Message{Body: p.body})
	}
	results, err := first.Send(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	b2 := slices.IndexFunc(payments, func(p e2ePayment) bool { return p.id == "pay_B2" })
	again, err := later.Send(ctx, []producer.Message{{Body: payments[b2].body}})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].DedupID == results[b2].DedupID || again[0].MessageID == results[b2].MessageID {
		t.Fatalf("the copy of pay_B2 went with dedup ID %s and message ID %s, as the first; want others", again[0].DedupID, again[0].MessageID)
	}
	payments = append(payments, payments[b2])
	results = append(results, again...)
	published := map[string]e2ePayment{} // by message ID
	for i, r := range results {
		published[r.MessageID] = payments[i]
	}
	if len(published) != len(payments) {
		t.Fatalf("%d message IDs for %d messages published", len(published), len(payments))
	}

	// The function: the real bootstrap, one warm process per batch in
	// flight, as `lambdakit run -concurrency 2` has.
	logs := &lambdakittest.LogBuffer{}
	// As deployed: each charge publishes payment.charged on its row.
	eventsURL := testenv.Queue(t, sqsc, true, nil)
	env := append(motoserver.Env(srv.URL),
		"PAYMENTS_TABLE="+f.cfg.PaymentsTable,
		"PAYMENT_GATEWAY_URL="+f.cfg.GatewayURL,
		"EVENTS_QUEUE_URL="+eventsURL,
	)
	var slots []*crashable
	var invokers []esm.Invoker
	for range e2eConcurrency {
		r, err := runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
			o.FunctionName = e2eFunctionName
			o.Timeout = e2eFunctionTimeout
			o.MemoryMB = 256
			o.LogFormat = "JSON"
			o.LogLevel = "DEBUG" // a line per message: a duplicate's is read below
			o.Env = env
			o.Stdout, o.Stderr = logs, logs
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		c := &crashable{runner: r}
		slots, invokers = append(slots, c), append(invokers, c)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("function output:\n%s", logs.String())
		}
	})

	// The crash: once pay_A3 is charged, and before the gateway answers,
	// the process running it is killed. It waits first for the other valid
	// payments of its batch to be recorded, so that the only record the
	// crash leaves unfinished is pay_A3, the last of its group.
	//
	// moto 5.2.1 hands the messages of one FIFO group that come back
	// together after a visibility timeout last one first (real SQS keeps
	// their order). The crashed batch comes back whole; had it held two
	// unfinished payments of one group, moto would charge them in the wrong
	// order, and the order check below would fail for moto's sake. This way
	// every payment the crashed batch brings back is a duplicate, except
	// pay_A3, which nothing follows in its group, so the order check stays
	// meaningful: it sees the order in which each group was first charged.
	crash := &crashReport{}
	poison := map[string]bool{}
	for _, p := range payments {
		poison[p.id] = p.poison
	}
	f.gw.OnCharge(func(c gateway.Charge, chargeID string) {
		if c.PaymentID != e2eCrashedPaymentID || !crash.start(chargeID) {
			return
		}
		var slot *crashable
		var others []string
		for _, s := range slots {
			if ids := s.payments(); slices.Contains(ids, c.PaymentID) {
				slot, others = s, ids
			}
		}
		if slot == nil {
			crash.finish(nil, false)
			return
		}
		// The wait ends before the batch's deadline guard would answer
		// for pay_A3 (then there would be no crash to test): on a loaded
		// machine the other payments can take longer than the guard
		// leaves.
		var pending []string
		deadline := time.Now().Add(e2eCrashWaitBound)
		if by := slot.invokedAt().Add(e2eFunctionTimeout - e2eDeadlineMargin - e2eCrashBy); by.Before(deadline) {
			deadline = by
		}
		for {
			pending = pending[:0]
			for _, id := range others {
				if id == c.PaymentID || poison[id] {
					continue
				}
				// Past the deadline a read is not worth its time under
				// load: the payment counts as pending.
				if time.Now().After(deadline) || !hasLedgerRow(f.db, f.cfg.PaymentsTable, id) {
					pending = append(pending, id)
				}
			}
			if len(pending) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		crash.finish(pending, slot.runner.Kill())
	})

	// Run until the queue is empty, as `lambdakit run -until-empty` does.
	var batches []esm.BatchResult
	mapping, err := esm.New(sqsc, queueURL, esm.NewPool(invokers...), func(o *esm.Options) {
		o.BatchSize = event.BatchSize
		o.Concurrency = e2eConcurrency
		o.ReportBatchItemFailures = event.ReportBatchItemFailures
		o.UntilEmpty = true
		o.OnBatch = func(b esm.BatchResult) { batches = append(batches, b) }
		o.OnWarning = func(err error) { t.Logf("esm warning: %v", err) }
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, e2eRunBound)
	defer cancel()
	start := time.Now()
	summary, err := mapping.Run(runCtx)
	took := time.Since(start)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("batches:\n%s", describeBatches(batches))
		}
	})
	switch {
	case err != nil:
		t.Fatalf("Run: %v", err)
	case runCtx.Err() != nil || !summary.Empty:
		t.Fatalf("the queue was not empty within %v; summary %+v", e2eRunBound, summary)
	}
	t.Logf("run: %v, %+v", took.Round(time.Millisecond), summary)

	// The crash happened as intended: one invocation, holding pay_A3,
	// killed after the charge, with the rest of its batch recorded.
	crashMsg := results[slices.IndexFunc(payments, func(p e2ePayment) bool { return p.id == e2eCrashedPaymentID })].MessageID
	chargeID, pending, killed := crash.result()
	switch {
	case chargeID == "":
		t.Fatalf("%s was never charged", e2eCrashedPaymentID)
	case !killed:
		t.Fatalf("the function running %s was not killed", e2eCrashedPaymentID)
	case len(pending) > 0:
		t.Errorf("the crash came before %v of its batch were recorded (waited %v)", pending, e2eCrashWaitBound)
	}
	var crashes []esm.BatchResult
	for _, b := range batches {
		if b.Result.Outcome == runtimeapi.OutcomeCrash {
			crashes = append(crashes, b)
		}
	}
	if len(crashes) != 1 || !slices.Contains(ids(crashes[0].Records), crashMsg) || len(crashes[0].Deleted) != 0 {
		t.Errorf("crashed batches: %s; want one, holding %s, with nothing deleted", describeBatches(crashes), crashMsg)
	}

	// Charged exactly once: one charge per valid payment, none for the
	// declined or poison ones.
	charges := f.gw.Charges()
	position := map[string]int{}
	for i, c := range charges {
		if _, twice := position[c.PaymentID]; twice {
			t.Errorf("%s was charged twice", c.PaymentID)
		}
		position[c.PaymentID] = i
	}
	var wantCharged []string
	for _, p := range payments {
		if !p.poison && !p.declined && !slices.Contains(wantCharged, p.id) {
			wantCharged = append(wantCharged, p.id)
		}
	}
	var gotCharged []string
	for id := range position {
		gotCharged = append(gotCharged, id)
	}
	slices.Sort(gotCharged)
	slices.Sort(wantCharged)
	if !slices.Equal(gotCharged, wantCharged) {
		t.Errorf("charged %v; want each of %v once", gotCharged, wantCharged)
	}

	// The crashed payment came back and was recognised: its retry reached
	// the gateway with the same Idempotency-Key and got the stored charge,
	// which the ledger records.
	key := "payment-" + e2eCrashedPaymentID
	if req, replays := gw.counts(key); req != 2 || replays != 1 {
		t.Errorf("gateway saw %s %d times, %d replayed; want twice: the charge and, after the crash, its replay", key, req, replays)
	}
	if row := f.ledger(t, e2eCrashedPaymentID); attr(row, "status") != StatusCharged || attr(row, "charge_id") != chargeID {
		t.Errorf("ledger row of %s: %q with %q; want CHARGED with %s, the charge made before the crash", e2eCrashedPaymentID, attr(row, "status"), attr(row, "charge_id"), chargeID)
	}
	if n := maxReceiveCount(batches, crashMsg); n < 2 {
		t.Errorf("%s was received %d times; want again after the crash", e2eCrashedPaymentID, n)
	}

	// Order within each group: each group's payments were first charged in
	// the order they were published.
	byGroup := map[string][]string{}
	for _, p := range payments[:len(payments)-1] { // the copy of pay_B2 adds no charge
		if _, ok := position[p.id]; ok {
			byGroup[p.customer] = append(byGroup[p.customer], p.id)
		}
	}
	for customer, ids := range byGroup {
		for i := 1; i < len(ids); i++ {
			if position[ids[i-1]] > position[ids[i]] {
				t.Errorf("%s: %s was charged after %s; want the order they were published in: %v", customer, ids[i-1], ids[i], ids)
			}
		}
	}

	// The copy of pay_B2 was recognised by the consumer: skipped as a
	// duplicate of the record on pay_B2's ledger row, which the line names
	// by its hashed ID (the row's own key holds the payment ID).
	copyMsg := results[len(results)-1].MessageID
	wantRecord := lambdakit.RecordID(idempotencyPrefix, payments[b2].id)
	if !slices.ContainsFunc(logline.Objects(logs.String()), func(l map[string]any) bool {
		dup := l["outcome"] == "duplicate" || l["outcome"] == "replayed"
		return l["msg"] == "message done" && dup && l["messageId"] == copyMsg && l["recordId"] == wantRecord
	}) {
		t.Errorf("no log line says that message %s (pay_B2 sent again) was skipped as a duplicate of %s", copyMsg, wantRecord)
	}

	// The DLQ holds the poison messages, each moved there after reaching
	// the function maxReceiveCount times, and nothing else.
	inDLQ := testenv.Drain(t, sqsc, dlqURL)
	var wantDLQ, gotDLQ []string
	for id, p := range published {
		if p.poison {
			wantDLQ = append(wantDLQ, id)
		}
	}
	for _, m := range inDLQ {
		id := aws.ToString(m.MessageId)
		gotDLQ = append(gotDLQ, id)
		if n := maxReceiveCount(batches, id); n != e2eMaxReceiveCount {
			t.Errorf("DLQ message %s (%s) reached the function %d times; want maxReceiveCount, %d", id, published[id].id, n, e2eMaxReceiveCount)
		}
	}
	slices.Sort(wantDLQ)
	slices.Sort(gotDLQ)
	if !slices.Equal(gotDLQ, wantDLQ) {
		t.Errorf("DLQ holds %v; want the poison messages %v and nothing else", gotDLQ, wantDLQ)
	}

	// The queue is empty.
	counts, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		if counts.Attributes[a] != "0" {
			t.Errorf("queue %s = %s; want 0", a, counts.Attributes[a])
		}
	}

	// Every published message is accounted for: deleted after its payment
	// was charged or declined (the ledger row commits with the idempotency
	// record), or in the DLQ; never both, and nothing else.
	deleted := map[string]int{}
	for _, b := range batches {
		for _, id := range b.Deleted {
			deleted[id]++
		}
	}
	for id, n := range deleted {
		if _, ok := published[id]; !ok || n != 1 {
			t.Errorf("message %s deleted %d times; want a published message, once", id, n)
		}
	}
	for id, p := range published {
		_, del := deleted[id]
		dead := slices.Contains(gotDLQ, id)
		switch {
		case del == dead:
			t.Errorf("message %s (%s): deleted %v, in the DLQ %v; want exactly one", id, p.id, del, dead)
		case del:
			want := StatusCharged
			if p.declined {
				want = StatusDeclined
			}
			if got := attr(f.ledger(t, p.id), "status"); got != want {
				t.Errorf("message %s (%s) was deleted with ledger status %q; want %s", id, p.id, got, want)
			}
		}
	}

	// The events: the real relay on the payments table's stream, as the
	// template maps it (its filter and its record attribute names), sends
	// one payment.charged per charged payment, the crashed one included,
	// and none for the decline, the duplicates or the poison.
	relayLogs := &logline.Buffer{}
	relay, err := runtimeapi.NewRunner(testenv.Build(t, "../relay"), func(o *runtimeapi.RunnerOptions) {
		o.FunctionName, o.Timeout = "relay", 10*time.Second
		o.Env = append(motoserver.Env(srv.URL), "RECORD_KEY_ATTR="+templateEnv(t, "RelayFunction", "RECORD_KEY_ATTR"),
			"RECORD_STATUS_ATTR="+templateEnv(t, "RelayFunction", "RECORD_STATUS_ATTR"))
		o.Stdout, o.Stderr = relayLogs, relayLogs
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		relay.Close()
		if t.Failed() {
			t.Logf("relay output:\n%s", relayLogs.String())
		}
	})
	stream, err := esm.NewStream(dynamodbstreams.NewFromConfig(moto.Config(t)), streamOf(t, f.db, f.cfg.PaymentsTable), relay, func(o *esm.StreamOptions) {
		o.ReportBatchItemFailures, o.UntilEmpty, o.Filter = true, true, relayFilter(t)
	})
	if err != nil {
		t.Fatal(err)
	}
	streamCtx, cancelStream := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStream()
	if sum, err := stream.Run(streamCtx); err != nil || !sum.Empty || sum.Filtered == 0 {
		t.Fatalf("relay: %+v, %v; want the stream read to its end, the locks passed over by the filter", sum, err)
	}
	var gotEvents []string
	for _, m := range testenv.Drain(t, sqsc, eventsURL) {
		var ev chargedEvent
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
			t.Fatal(err)
		}
		gotEvents = append(gotEvents, ev.PaymentID)
	}
	if slices.Sort(gotEvents); !slices.Equal(gotEvents, wantCharged) {
		t.Errorf("payment.charged events for %v; want one per charge, %v", gotEvents, wantCharged)
	}
}

// gatewayObserver counts, per Idempotency-Key, the requests that reach the
// gateway and those answered from its store.
type gatewayObserver struct {
	gw       *gateway.Gateway
	mu       sync.Mutex
	requests map[string]int
	replays  map[string]int
}

func (o *gatewayObserver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.gw.ServeHTTP(w, r)
	key := r.Header.Get("Idempotency-Key")
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.requests == nil {
		o.requests, o.replays = map[string]int{}, map[string]int{}
	}
	o.requests[key]++
	if w.Header().Get("Idempotent-Replayed") == "true" {
		o.replays[key]++
	}
}

func (o *gatewayObserver) counts(key string) (requests, replays int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[key], o.replays[key]
}

// crashable is one batch slot: a Runner, and the payment IDs of the event
// it is running, so that the crash hook can find the process to kill.
type crashable struct {
	runner *runtimeapi.Runner
	mu     sync.Mutex
	ids    []string
	at     time.Time // when the invocation in flight began
}

func (c *crashable) Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	var ev events.SQSEvent
	_ = json.Unmarshal(event, &ev) // an event that does not decode names no payments
	var ids []string
	for _, m := range ev.Records {
		var p struct {
			ID string `json:"payment_id"`
		}
		_ = json.Unmarshal([]byte(m.Body), &p)
		ids = append(ids, p.ID)
	}
	c.mu.Lock()
	c.ids, c.at = ids, time.Now()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.ids = nil
		c.mu.Unlock()
	}()
	return c.runner.Invoke(ctx, event, optFns...)
}

func (c *crashable) invokedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *crashable) payments() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ids)
}

// crashReport is what the crash hook did, written from the gateway's
// goroutine.
type crashReport struct {
	mu       sync.Mutex
	started  bool
	chargeID string
	pending  []string
	killed   bool
}

// start reports whether this is the first call, recording the charge.
func (c *crashReport) start(chargeID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return false
	}
	c.started, c.chargeID = true, chargeID
	return true
}

func (c *crashReport) finish(pending []string, killed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending, c.killed = slices.Clone(pending), killed
}

func (c *crashReport) result() (chargeID string, pending []string, killed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chargeID, c.pending, c.killed
}

// hasLedgerRow reports whether the payment has its ledger row, completed:
// with the ledger's status, which the row of a payment in progress (its
// record's lock) does not have yet. Errors count as no, as the caller
// polls.
func hasLedgerRow(db *dynamodb.Client, table, paymentID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{ledgerKeyAttr: &types.AttributeValueMemberS{Value: ledgerKey(paymentID)}},
	})
	return err == nil && attr(out.Item, "status") != ""
}

func ids(recs []events.SQSMessage) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.MessageId
	}
	return out
}

// maxReceiveCount is the highest ApproximateReceiveCount the message had in
// any batch.
func maxReceiveCount(batches []esm.BatchResult, messageID string) int {
	most := 0
	for _, b := range batches {
		for _, r := range b.Records {
			if r.MessageId == messageID {
				n, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
				most = max(most, n)
			}
		}
	}
	return most
}

// describeBatches tells what each batch held and what became of it, for
// failure messages.
func describeBatches(batches []esm.BatchResult) string {
	var b strings.Builder
	for i, br := range batches {
		var recs []string
		for _, r := range br.Records {
			var p struct {
				ID string `json:"payment_id"`
			}
			_ = json.Unmarshal([]byte(r.Body), &p)
			recs = append(recs, fmt.Sprintf("%s[%s]#%s", p.ID, r.Attributes["MessageGroupId"], r.Attributes["ApproximateReceiveCount"]))
		}
		why := ""
		if br.Err != nil {
			why = ": " + br.Err.Error()
		}
		if errors.Is(br.Err, esm.ErrInvocationFailed) && br.Result.Error != nil {
			why += " (" + br.Result.Error.Message + ")"
		}
		fmt.Fprintf(&b, "  %2d %-8s %v deleted %d left %d failed %d%s\n", i+1, br.Result.Outcome, recs, len(br.Deleted), len(br.Left), len(br.Failed), why)
	}
	return b.String()
}
