package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// The demo's last act sends payments the way they come in AWS, through
// the stack as deployed: it deploys template.yaml on the local AWS (what
// make deploy-local does), reads the function's configuration and its SQS
// event source mapping back from Lambda, and runs that mapping (what
// `lambdakit run -function` does). A producer publishes the payments to the
// stack's FIFO queue, the mapping feeds them to the function, and a crash
// kills the function once, after the gateway took the money and before it
// answered.
//
// The stack's timings are scaled down after the deploy, with the calls an
// operator would make, so that the act takes seconds: function timeout 2 s
// (60 s), visibility timeout 4 s (360 s: longer than the function's
// timeout, so that a crashed invocation's lease has ended when its
// messages come back), maxReceiveCount 2 (5). The deployed mapping is
// disabled, as `lambdakit run` asks and as one would on AWS: this run
// takes its place.
const (
	queueFile            = "payments-queue.jsonl"
	queueFunctionTimeout = 2 * time.Second
	queueVisibility      = 4
	queueMaxReceiveCount = 2
	// queueResent is published a second time by a producer whose key
	// differs, so with another deduplication ID: SQS takes it, as it takes a
	// producer's retry after its 5-minute window.
	queueResent = "pay_6002"
	// queueCrash is the payment whose invocation is killed. It is the last
	// of its group: moto hands a FIFO group's messages that come back
	// together last one first (real SQS keeps their order), so the crash
	// should leave no earlier payment of the group unfinished.
	queueCrash = "pay_6004"
	// queueRunBound bounds the run; it takes about 2 visibility timeouts.
	queueRunBound = time.Minute
	// queueDeployBound bounds the deploy: a build, a transform, a stack.
	queueDeployBound = 5 * time.Minute
)

// queueOutcome is what the queue act found, for the summary.
type queueOutcome struct {
	ledger      string // the stack's payments table
	published   int
	deleted     int      // deleted from the queue, those the function dead-lettered included
	inDLQ       []string // payment IDs
	redriven    int      // of inDLQ, those the redrive policy moved (the others the function sent)
	chargedDLQ  []string // payment IDs in the DLQ that the gateway charged all the same
	leftInQ     int
	crashed     bool   // the crash happened where intended
	crashCharge string // the charge made just before the crash
	chargesOf   int    // charges of queueCrash at the gateway
}

// crashSlot runs the function and remembers the records of the event in
// flight, so that the crash hook knows the batch it interrupts. Its
// Capacity of one makes the mapping give it one batch at a time.
type crashSlot struct {
	runner *runtimeapi.Runner
	mu     sync.Mutex
	recs   []events.SQSMessage
}

// Capacity tells the mapping that the slot runs one batch at a time.
func (s *crashSlot) Capacity() int { return 1 }

func (s *crashSlot) Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	var ev events.SQSEvent
	_ = json.Unmarshal(event, &ev) // an event that does not decode holds no records
	s.mu.Lock()
	s.recs = ev.Records
	s.mu.Unlock()
	return s.runner.Invoke(ctx, event, optFns...)
}

func (s *crashSlot) records() []events.SQSMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// crashLog is what the crash hook and the batches saw, written from their
// goroutines.
type crashLog struct {
	mu      sync.Mutex
	crashed bool              // a batch holding queueCrash ended in a crash
	charges map[string]string // payment ID → its charge, as the gateway made them
}

// chargeOf is the charge the gateway made for a payment in this act, if any.
func (c *crashLog) chargeOf(paymentID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.charges[paymentID]
	return ch, ok
}

func (c *crashLog) get() (charge string, crashed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.charges[queueCrash], c.crashed
}

// playQueue is the queue act: number n of the story.
// It returns the stack it deployed, for the outbox act.
func (d *demo) playQueue(ctx context.Context, n int, bootstrap, template, file string, environ []string) (queueOutcome, *stack, error) {
	var out queueOutcome
	fmt.Fprintf(d.out, "\n%d. Through the queue of the deployed stack: publish, then its event source mapping, with a crash after a charge\n", n)

	st, err := d.deployStack(ctx, template)
	if err != nil {
		return out, st, err
	}
	out.ledger = st.paymentsTable
	queueURL, dlqURL, sqsc := st.queueURL, st.dlqURL, st.sqs
	// Publish, as `lambdakit publish -key-field payment_id -group-field
	// customer_id` does, then queueResent again with another key.
	bodies, err := jsonLines(file)
	if err != nil {
		return out, st, err
	}
	key := lambdakit.KeyFromField("payment_id")
	group := producer.GroupFromField("customer_id")
	first, err := producer.NewFromQueue(ctx, sqsc, queueURL, func(o *producer.Options) { o.Key, o.Group = key, group })
	if err != nil {
		return out, st, err
	}
	later, err := producer.NewFromQueue(ctx, sqsc, queueURL, func(o *producer.Options) {
		o.Key = func(m *events.SQSMessage) (string, error) {
			k, err := key(m)
			return k + "|after the window", err
		}
		o.Group = group
	})
	if err != nil {
		return out, st, err
	}
	var msgs []producer.Message
	resend := -1
	for i, b := range bodies {
		msgs = append(msgs, producer.Message{Body: b})
		if paymentID(b) == queueResent {
			resend = i
		}
	}
	if resend < 0 {
		return out, st, fmt.Errorf("%s: no %s to send twice", file, queueResent)
	}
	results, err := first.Send(ctx, msgs)
	if err != nil {
		return out, st, err
	}
	again, err := later.Send(ctx, msgs[resend:resend+1])
	if err != nil {
		return out, st, err
	}
	published := map[string]string{} // message ID → payment ID
	for i, r := range results {
		published[r.MessageID] = paymentID(bodies[i])
	}
	published[again[0].MessageID] = queueResent
	out.published = len(published)
	fmt.Fprintf(d.out, "   published %s: %s, deduplication ID = sha256(payment_id), group = customer_id\n", file, plural(len(results), "message"))
	fmt.Fprintf(d.out, "   published %s again with another deduplication ID (%.12s… instead of %.12s…), as a producer's retry after SQS's 5-minute window\n",
		queueResent, again[0].DedupID, results[resend].DedupID)

	// The function as deployed, behind one batch slot.
	runner, err := d.newDeployedRunner(bootstrap, st.fn, environ, d.moto.URL)
	if err != nil {
		return out, st, err
	}
	defer runner.Close()
	slot := &crashSlot{runner: runner}

	// The crash: when the gateway has charged queueCrash, and before it
	// answers, kill the function. The whole batch comes back; moto would
	// hand a group's unfinished records back in reverse, so first the
	// function is given a moment (a quarter of its timeout, well before
	// its deadline guard) to complete the records of every group with more
	// than one record in the batch, as the idempotency table shows.
	crash := &crashLog{charges: map[string]string{}}
	d.gw.OnCharge(func(c gateway.Charge, chargeID string) {
		crash.mu.Lock()
		crash.charges[c.PaymentID] = chargeID
		crash.mu.Unlock()
		if c.PaymentID != queueCrash {
			return
		}
		recs := slot.records()
		inGroup := map[string]int{}
		for _, m := range recs {
			inGroup[m.Attributes["MessageGroupId"]]++
		}
		var others []events.SQSMessage
		for _, m := range recs {
			if paymentID(m.Body) != queueCrash && inGroup[m.Attributes["MessageGroupId"]] > 1 {
				others = append(others, m)
			}
		}
		d.awaitCompleted(st.paymentsTable, others, st.fn.Timeout/4)
		runner.Kill()
	})
	defer d.gw.OnCharge(nil)

	m := st.mapping
	fmt.Fprintf(d.out, "   running the deployed mapping until the queue is empty (batch size %d, window %v, ReportBatchItemFailures %v; one batch at a time: one function process)\n",
		m.BatchSize, m.Window, m.ReportBatchItemFailures)
	d.logs.Reset()
	batch := 0
	summary, err := st.runMapping(ctx, slot, func(b esm.BatchResult) {
		batch++
		if b.Result.Outcome == runtimeapi.OutcomeCrash && slices.ContainsFunc(b.Records, func(m events.SQSMessage) bool { return paymentID(m.Body) == queueCrash }) {
			crash.mu.Lock()
			crash.crashed = true
			crash.mu.Unlock()
		}
		d.printBatch(batch, b, crash)
	})
	if err != nil {
		return out, st, err
	}
	out.deleted = summary.Deleted

	// Where everything went.
	dead, err := peekAll(ctx, sqsc, dlqURL)
	if err != nil {
		return out, st, err
	}
	for _, m := range dead {
		id := paymentID(aws.ToString(m.Body))
		out.inDLQ = append(out.inDLQ, id)
		if _, ok := published[aws.ToString(m.MessageId)]; ok {
			out.redriven++ // the redrive policy keeps the message ID
		}
	}
	left, err := peekAll(ctx, sqsc, queueURL)
	if err != nil {
		return out, st, err
	}
	out.leftInQ = len(left)
	out.crashCharge, out.crashed = crash.get()
	for _, c := range d.gw.Charges() {
		if c.PaymentID == queueCrash {
			out.chargesOf++
		}
		if slices.Contains(out.inDLQ, c.PaymentID) {
			out.chargedDLQ = append(out.chargedDLQ, c.PaymentID)
		}
	}
	fmt.Fprintf(d.out, "   queue empty after %s: %s received in all, %d deleted, %d moved to the DLQ\n",
		plural(summary.Invocations, "invocation"), plural(summary.Records, "record"), summary.Deleted, len(dead))
	for _, m := range dead {
		how := "sent there by the function on its first delivery (DEAD_LETTER_QUEUE_URL): it can never succeed"
		if _, ok := published[aws.ToString(m.MessageId)]; ok {
			how = fmt.Sprintf("moved there by the redrive policy after failing %d deliveries", queueMaxReceiveCount)
		}
		fmt.Fprintf(d.out, "   DLQ %s: %s, %s\n", st.dlqName, paymentID(aws.ToString(m.Body)), how)
	}
	return out, st, nil
}

// printBatch prints one batch of the queue act and each record's fate.
func (d *demo) printBatch(n int, b esm.BatchResult, crash *crashLog) {
	crashCharge, _ := crash.get()
	receive := "first delivery"
	if len(b.Records) > 0 && b.Records[0].Attributes["ApproximateReceiveCount"] != "1" {
		receive = "back after the visibility timeout"
	}
	crashed := b.Result.Outcome == runtimeapi.OutcomeCrash
	switch {
	case crashed:
		fmt.Fprintf(d.out, "   batch %d: %s, %s: the function was killed after the gateway charged %s, before it answered; the whole batch stays\n",
			n, plural(len(b.Records), "record"), receive, queueCrash)
	case b.Err != nil:
		fmt.Fprintf(d.out, "   batch %d: %s, %s: the invocation failed (%s); the whole batch stays\n", n, plural(len(b.Records), "record"), receive, b.Result.Outcome)
	default:
		fmt.Fprintf(d.out, "   batch %d: %s, %s: %d deleted, %d left for redelivery\n", n, plural(len(b.Records), "record"), receive, len(b.Deleted), len(b.Left))
	}
	if !crashed {
		// A killed function writes no record lines: they are written
		// when the batch answers.
		awaitLines(&d.logs, b.Records)
	}
	if d.verbose {
		fmt.Fprint(d.out, indent(d.logs.String(), "   | "))
	}
	lines := d.logs.Objects()
	d.tally(lines)
	d.logs.Reset()
	told := map[string]bool{} // payment IDs whose charge a line above gave
	for _, m := range b.Records {
		id := paymentID(m.Body)
		fate := recordFate(m.MessageId, slices.Contains(b.Left, m.MessageId), lines)
		charge, charged := crash.chargeOf(id)
		switch {
		case crashed && id == queueCrash:
			fate = "KILLED     charged " + crashCharge + " at the gateway; the answer never came back"
		case crashed && charged && !told[id]:
			// What the gateway saw: the function logs nothing
			// about a record until its batch answers.
			told[id] = true
			fate = "no answer  charged " + charge + " at the gateway, but the process died before the batch was answered"
		case crashed:
			fate = "no answer  the process died before the batch was answered"
		case id == queueCrash && strings.HasSuffix(fate, " "+crashCharge) && crashCharge != "":
			fate += " again: the gateway's stored answer for the same Idempotency-Key, no new charge"
		}
		fmt.Fprintf(d.out, "   %-12s%-8s %s\n", id, " ["+m.Attributes["MessageGroupId"]+"]", fate)
	}
}

// peekAll receives every message of a queue without deleting it, hiding
// them for a minute.
func peekAll(ctx context.Context, client *sqs.Client, url string) ([]sqstypes.Message, error) {
	return receiveAll(ctx, client, url, false)
}

// jsonLines returns the lines of a file of JSON lines that are not blank.
func jsonLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	for l, err := range logline.Lines(f) {
		if err != nil {
			return nil, err
		}
		lines = append(lines, strings.TrimSpace(l.Text))
	}
	return lines, nil
}

// queueSummary prints the queue act's lines of the summary and reports
// whether they are as they must be.
func (d *demo) queueSummary(q queueOutcome) bool {
	ok := true
	accounted := q.deleted + q.redriven // a message the function dead-lettered was deleted
	sent := len(q.inDLQ) - q.redriven
	fmt.Fprintf(d.out, "   queue: %d messages published, %d deleted after success, %d deleted once the function sent it to the DLQ, %d moved to the DLQ by the redrive policy (DLQ: %s), %d left\n",
		q.published, q.deleted-sent, sent, q.redriven, strings.Join(q.inDLQ, ", "), q.leftInQ)
	if accounted != q.published || q.leftInQ != 0 {
		fmt.Fprintf(d.out, "   %d of %d published messages are accounted for\n", accounted, q.published)
		ok = false
	}
	if len(q.chargedDLQ) > 0 {
		// A payment that was charged must not need a redrive.
		fmt.Fprintf(d.out, "   charged, yet in the DLQ: %s\n", strings.Join(q.chargedDLQ, ", "))
		ok = false
	}
	switch {
	case !q.crashed:
		fmt.Fprintf(d.out, "   the function was never killed after charging %s\n", queueCrash)
		ok = false
	case q.chargesOf != 1:
		fmt.Fprintf(d.out, "   %s was charged %d times\n", queueCrash, q.chargesOf)
		ok = false
	case slices.Contains(q.inDLQ, queueCrash):
		// Its redeliveries found the dead invocation's lock still held: the
		// visibility timeout must outlast the function's timeout.
		fmt.Fprintf(d.out, "   %s was charged once, but its redeliveries could not complete it before it went to the DLQ\n", queueCrash)
		ok = false
	default:
		fmt.Fprintf(d.out, "   %s was charged once (%s), though the function was killed after the charge: its redelivery took over the lapsed lock and got the gateway's stored answer\n", queueCrash, q.crashCharge)
	}
	return ok
}

// paymentPrefix is the payment sample's lambdakit.Options.Prefix: with its
// ReadableIDs, a payment's record, and so its ledger row, is
// "payment#<payment_id>" (ledgerKey).
const paymentPrefix = "payment"

// ledgerKey is the key of the ledger row of paymentID, which is its
// idempotency record's ID.
func ledgerKey(paymentID string) string { return paymentPrefix + "#" + paymentID }

// recordOnLedger names the attributes of the record on a ledger row as the
// payment function does: the table's key payment_id, the record's status
// record_status beside the ledger's own status.
func recordOnLedger(o *dynamostore.Options) {
	o.KeyAttr = "payment_id"
	o.StatusAttr = "record_status"
}

// awaitCompleted waits, up to bound, until the idempotency records of recs'
// payments, on their ledger rows in table, are completed. The function's
// log says nothing about a record until its batch answers, so the table is
// where a record's end shows while its batch is still running.
func (d *demo) awaitCompleted(table string, recs []events.SQSMessage, bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	records := dynamostore.NewRecords(d.db, table, recordOnLedger)
	for _, m := range recs {
		id := ledgerKey(paymentID(m.Body))
		for ctx.Err() == nil {
			if rec, err := records.Get(ctx, id); err == nil && rec.Status == lambdakit.StatusCompleted {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
