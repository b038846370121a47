package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// The outbox act follows the queue act on the same deployed stack. Each
// charge of the payment function wrote its payment.charged onto its own
// ledger row, in the one UpdateItem that recorded the charge
// (outbox.PublishOnRecord); the relay (functions/relay, RelayFunction)
// reads the payments table's stream through its deployed mapping, its
// FilterCriteria applied, and sends each completion's message to the
// events queue. Two crashes:
// the payment function killed after its commit and before it answered,
// and the relay killed after SQS took a message and before it answered.
// Every charge still makes exactly one message.

// outboxPayment is published for the first crash: its group has no other
// message, so its return after the crash reorders nothing.
const outboxPayment = `{"payment_id": "pay_6005", "order_id": "ord_7005", "customer_id": "cus_J", "amount": 3100, "currency": "EUR"}`

// outboxOutcome is what the outbox act found, for the summary.
type outboxOutcome struct {
	paymentKilled bool              // the payment function died after committing outboxPayment
	chargesOf     int               // charges of outboxPayment at the gateway
	relayKilled   string            // the payment whose message SQS took before the relay died
	charged       []string          // payment IDs of the stack's CHARGED ledger rows
	messages      map[string]int    // payment ID → messages the ledger received (first deliveries)
	dedupIDs      map[string]string // payment ID → its message's deduplication ID
	entries       []string          // payment IDs of the ledger's entries
	ledgerWrites  int               // the ledger's DynamoDB write requests
	resentSkipped bool              // the event sent again was dropped as a duplicate
	filtered      int               // stream records the relay's filter passed over (locks, releases, declines)
}

// callProxy forwards a function's AWS calls to the local AWS, counting the
// DynamoDB writes; with a match, it kills the function once, when the
// answer to the first call match accepts has come back: the call took
// effect, and the function never hears of it.
type callProxy struct {
	url    string
	srv    *http.Server
	fired  atomic.Bool
	writes atomic.Int64 // DynamoDB write requests that came back 200
}

// startProxy starts a proxy to target. match (nil: never) gets each
// call's X-Amz-Target header and body; kill gets the body of the call it
// kills on.
func startProxy(target string, match func(op string, body []byte) bool, kill func(body []byte)) (*callProxy, error) {
	to, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		return nil, err
	}
	p := &callProxy{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(to)
	rp.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			if body, err = io.ReadAll(req.Body); err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusOK && dynamoDBWrite(req.Header.Get("X-Amz-Target")) {
			p.writes.Add(1)
		}
		if err != nil || resp.StatusCode != http.StatusOK || match == nil || !match(req.Header.Get("X-Amz-Target"), body) || !p.fired.CompareAndSwap(false, true) {
			return resp, err
		}
		resp.Body.Close()
		kill(body)
		return nil, errors.New("the function was killed before this answer reached it")
	})
	// The dying function gets a 502, quietly: the kill is the point.
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	p.srv = &http.Server{Handler: rp}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *callProxy) close() { _ = p.srv.Close() }

// dynamoDBWrite reports whether the X-Amz-Target op is a DynamoDB write.
func dynamoDBWrite(op string) bool {
	switch strings.TrimPrefix(op, "DynamoDB_20120810.") {
	case "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem":
		return strings.HasPrefix(op, "DynamoDB_20120810.")
	}
	return false
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// playOutbox is the outbox act: number n of the story.
func (d *demo) playOutbox(ctx context.Context, n int, st *stack, bootstrap, relayBootstrap, ledgerBootstrap string, environ []string) (outboxOutcome, error) {
	out := outboxOutcome{messages: map[string]int{}, dedupIDs: map[string]string{}}
	fmt.Fprintf(d.out, "\n%d. The outbox: each charge publishes payment.charged in its own commit; the relay sends it from the stream, once; the ledger records it, once\n", n)
	cfg := d.moto.AWSConfig()
	db, lc := dynamodb.NewFromConfig(cfg), lambda.NewFromConfig(cfg)
	eventsURL, failuresURL := st.outputs["PaymentEventsQueueUrl"], st.outputs["RelayFailureQueueUrl"]
	for _, k := range []string{"PaymentEventsQueueUrl", "RelayFailureQueueUrl", "RelayFunctionName", "LedgerFunctionName", "LedgerTableName"} {
		if st.outputs[k] == "" {
			return out, fmt.Errorf("the stack has no %s output", k)
		}
	}

	// The payment function, killed after the commit of outboxPayment.
	pid := paymentID(outboxPayment)
	pub, err := producer.NewFromQueue(ctx, st.sqs, st.queueURL, func(o *producer.Options) {
		o.Key, o.Group = lambdakit.KeyFromField("payment_id"), producer.GroupFromField("customer_id")
	})
	if err != nil {
		return out, err
	}
	if _, err := pub.Send(ctx, []producer.Message{{Body: outboxPayment}}); err != nil {
		return out, err
	}
	fmt.Fprintf(d.out, "   published %s to %s\n", pid, st.mapping.QueueName)
	var runner *runtimeapi.Runner
	commit, err := startProxy(d.moto.URL, func(op string, body []byte) bool {
		// The completion of pid's record, with its event: the update of
		// its ledger row.
		return op == "DynamoDB_20120810.UpdateItem" && bytes.Contains(body, []byte(`"`+ledgerKey(pid)+`"`))
	}, func([]byte) { runner.Kill() })
	if err != nil {
		return out, err
	}
	defer commit.close()
	if runner, err = d.newDeployedRunner(bootstrap, st.fn, environ, commit.url); err != nil {
		return out, err
	}
	defer runner.Close()
	d.logs.Reset()
	batch := 0
	if _, err := st.runMapping(ctx, runner, func(b esm.BatchResult) {
		batch++
		if b.Result.Outcome == runtimeapi.OutcomeCrash {
			out.paymentKilled = commit.fired.Load()
			fmt.Fprintf(d.out, "   batch %d: %s: the function was killed after its commit (ledger row completed as its idempotency record, its payment.charged on it, in one UpdateItem), before it answered; the batch stays\n",
				batch, plural(len(b.Records), "record"))
			d.logs.Reset()
			return
		}
		awaitLines(&d.logs, b.Records)
		lines := d.logs.Objects()
		d.tally(lines)
		d.logs.Reset()
		fmt.Fprintf(d.out, "   batch %d: %s, back after the visibility timeout: %d deleted\n", batch, plural(len(b.Records), "record"), len(b.Deleted))
		for _, m := range b.Records {
			fmt.Fprintf(d.out, "   %-12s%-8s %s\n", paymentID(m.Body), " ["+m.Attributes["MessageGroupId"]+"]", recordFate(m.MessageId, slices.Contains(b.Left, m.MessageId), lines))
		}
	}); err != nil {
		return out, err
	}
	for _, c := range d.gw.Charges() {
		if c.PaymentID == pid {
			out.chargesOf++
		}
	}

	// The relay, as deployed, killed after SQS took its first message.
	relay, streamARN, rm, err := d.deployedRelay(ctx, lc, st.outputs["RelayFunctionName"])
	if err == nil && !strings.Contains(streamARN, ":table/"+st.paymentsTable+"/stream/") {
		err = fmt.Errorf("relay %s reads %s; want the payments table %s's stream", relay.Name, streamARN, st.paymentsTable)
	}
	if err != nil {
		return out, err
	}
	var relayRunner *runtimeapi.Runner
	var sentMu sync.Mutex
	type sendInput struct{ QueueUrl, MessageBody string }
	send, err := startProxy(d.moto.URL, func(op string, body []byte) bool {
		var in sendInput
		return op == "AmazonSQS.SendMessage" && json.Unmarshal(body, &in) == nil && in.QueueUrl == eventsURL
	}, func(body []byte) {
		var in sendInput
		_ = json.Unmarshal(body, &in) // match decoded it
		sentMu.Lock()
		out.relayKilled = paymentID(in.MessageBody)
		sentMu.Unlock()
		relayRunner.Kill()
	})
	if err != nil {
		return out, err
	}
	defer send.close()
	var relayLogs logline.Buffer
	relayRunner, err = runtimeapi.NewRunner(relayBootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName, o.Region, o.Timeout, o.MemoryMB = relay.Name, relay.Region, relay.Timeout, relay.MemoryMB
		o.LogFormat = "JSON"
		o.Env = append(withoutEndpoints(environ), withoutEndpoints(relay.Env)...)
		o.Env = append(o.Env, motoserver.Env(send.url)...)
		o.Stdout, o.Stderr = &relayLogs, &relayLogs
	})
	if err != nil {
		return out, err
	}
	defer relayRunner.Close()
	if !strings.HasSuffix(rm.onFailure, ":"+failuresURL[strings.LastIndex(failuresURL, "/")+1:]) {
		return out, fmt.Errorf("relay %s: on-failure destination %q; want the stack's failure queue %s", relay.Name, rm.onFailure, failuresURL)
	}
	fmt.Fprintf(d.out, "   relay %s on the payments table's stream (batch size %d, ReportBatchItemFailures %v, MaximumRetryAttempts %d, BisectBatchOnFunctionError %v, %s, on failure the stack's failure queue; this run takes the place of its mapping, disabled)\n",
		relay.Name, rm.batchSize, rm.reportFailures, rm.maxRetries, rm.bisect, plural(rm.filter.Len(), "filter"))
	relayBatch := 0
	stream, err := esm.NewStream(dynamodbstreams.NewFromConfig(cfg), streamARN, relayRunner, func(o *esm.StreamOptions) {
		o.BatchSize = rm.batchSize
		o.ReportBatchItemFailures = rm.reportFailures
		o.MaximumRetryAttempts = rm.maxRetries
		o.BisectBatchOnFunctionError = rm.bisect
		o.OnFailure = &esm.SQSDestination{Client: st.sqs, QueueURL: failuresURL}
		o.Filter = rm.filter
		o.UntilEmpty = true
		o.Region = relay.Region
		o.OnBatch = func(b esm.StreamBatchResult) {
			relayBatch++
			// What the filter let through: completed rows with messages.
			completions := len(b.Records)
			switch {
			case b.Result.Outcome == runtimeapi.OutcomeCrash:
				sentMu.Lock()
				killed := out.relayKilled
				sentMu.Unlock()
				fmt.Fprintf(d.out, "   relay batch %d: %s: the relay was killed after SQS took %s's payment.charged, before it answered; the shard is read again from its checkpoint\n",
					relayBatch, plural(completions, "completion"), killed)
			case b.Err != nil || b.RetryFrom != "":
				fmt.Fprintf(d.out, "   relay batch %d: %s: failed (%s), read again from %s\n", relayBatch, plural(completions, "completion"), b.Result.Outcome, b.RetryFrom)
			default:
				fmt.Fprintf(d.out, "   relay batch %d: %s sent to the events queue\n", relayBatch, plural(completions, "completion"))
			}
			if d.verbose {
				fmt.Fprint(d.out, indent(relayLogs.String(), "   | "))
			}
			relayLogs.Reset()
		}
	})
	if err != nil {
		return out, err
	}
	runCtx, cancel := context.WithTimeout(ctx, queueRunBound)
	ssum, err := stream.Run(runCtx)
	cancel()
	switch {
	case err != nil:
		return out, err
	case !ssum.Empty:
		return out, fmt.Errorf("the payments table's stream still had records after %v", queueRunBound)
	}
	out.filtered = ssum.Filtered

	// The events queue's consumer, as deployed: the ledger, one request
	// per new entry. Then the event whose send the relay never heard of,
	// sent again with another deduplication ID, as SQS would take it after
	// its 5-minute window: the ledger drops it as a duplicate.
	if err := d.playLedger(ctx, lc, st, ledgerBootstrap, environ, eventsURL, &out); err != nil {
		return out, err
	}
	rows, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(st.paymentsTable)})
	if err != nil {
		return out, err
	}
	for _, item := range rows.Items {
		if s, ok := item["status"].(*types.AttributeValueMemberS); ok && s.Value == "CHARGED" {
			if p, ok := item["payment_id"].(*types.AttributeValueMemberS); ok {
				out.charged = append(out.charged, strings.TrimPrefix(p.Value, paymentPrefix+"#"))
			}
		}
	}
	slices.Sort(out.charged)
	failures, err := receiveAll(ctx, st.sqs, failuresURL, false)
	if err != nil {
		return out, err
	}
	if len(failures) > 0 {
		return out, fmt.Errorf("the relay's failure queue holds %d messages; want none", len(failures))
	}
	return out, nil
}

// playLedger runs the stack's ledger function, read back from Lambda with
// its SQS mapping, on the events queue until it is empty; then sends the
// event the relay was killed after again, with another deduplication ID,
// and runs it once more. It fills out's messages, entries and counts.
func (d *demo) playLedger(ctx context.Context, lc *lambda.Client, st *stack, bootstrap string, environ []string, eventsURL string, out *outboxOutcome) error {
	fn, err := deployed.ReadFunction(ctx, lc, st.outputs["LedgerFunctionName"])
	if err != nil {
		return err
	}
	ms, err := deployed.SQSMappings(ctx, lc, fn)
	if err != nil {
		return err
	}
	m, err := deployed.Choose(fn.ARN, ms, deployed.QueueRef{})
	if err != nil {
		return err
	}
	if _, err := lc.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{UUID: aws.String(m.UUID), Enabled: aws.Bool(false)}); err != nil {
		return err
	}
	count, err := startProxy(d.moto.URL, nil, nil)
	if err != nil {
		return err
	}
	defer count.close()
	var logs logline.Buffer
	runner, err := runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName, o.Region, o.Timeout, o.MemoryMB = fn.Name, fn.Region, fn.Timeout, fn.MemoryMB
		o.LogFormat, o.LogLevel = "JSON", "DEBUG" // a line per message, read below
		o.Env = append(withoutEndpoints(environ), withoutEndpoints(fn.Env)...)
		o.Env = append(o.Env, motoserver.Env(count.url)...)
		o.Stdout, o.Stderr = &logs, &logs
	})
	if err != nil {
		return err
	}
	defer runner.Close()
	fmt.Fprintf(d.out, "   ledger %s on %s (batch size %d, ReportBatchItemFailures %v; its mapping disabled, this run takes its place)\n",
		fn.Name, m.QueueName, m.BatchSize, m.ReportBatchItemFailures)
	var last events.SQSMessage           // of the relay-killed payment
	seen := map[string]map[string]bool{} // payment ID → message IDs, before the resend
	resent := false
	run := func() error {
		mapping, err := esm.New(st.sqs, eventsURL, runner, func(o *esm.Options) {
			o.BatchSize, o.Window, o.ReportBatchItemFailures = m.BatchSize, m.Window, m.ReportBatchItemFailures
			o.Concurrency, o.FunctionTimeout, o.UntilEmpty = esm.MinConcurrency, fn.Timeout, true
			o.OnBatch = func(b esm.BatchResult) {
				awaitLines(&logs, b.Records)
				lines := logs.Objects()
				for _, r := range b.Records {
					id := paymentID(r.Body)
					fate := "FAILED"
					switch outcome(r.MessageId, lines) {
					case "processed":
						fate = "recorded   entry#" + id
						out.dedupIDs[id] = r.Attributes["MessageDeduplicationId"]
					case "duplicate", "replayed":
						fate = "skipped    duplicate, no write"
						if id == out.relayKilled {
							out.resentSkipped = true
						}
					}
					if !resent {
						// Distinct messages: SQS may deliver one twice.
						if seen[id] == nil {
							seen[id] = map[string]bool{}
						}
						seen[id][r.MessageId] = true
					}
					if id == out.relayKilled {
						last = r
					}
					fmt.Fprintf(d.out, "   ledger: %-10s [%s] %s (deduplication ID %.12s…, %s %.20s…)\n", id, r.Attributes["MessageGroupId"], fate,
						r.Attributes["MessageDeduplicationId"], outbox.IDAttribute, aws.ToString(r.MessageAttributes[outbox.IDAttribute].StringValue))
				}
				logs.Reset()
			}
		})
		if err != nil {
			return err
		}
		runCtx, cancel := context.WithTimeout(ctx, queueRunBound)
		defer cancel()
		sum, err := mapping.Run(runCtx)
		if err == nil && !sum.Empty {
			err = fmt.Errorf("the events queue was not empty after %v", queueRunBound)
		}
		return err
	}
	if err := run(); err != nil {
		return err
	}
	out.ledgerWrites = int(count.writes.Load())
	for id, msgs := range seen {
		out.messages[id] = len(msgs)
	}
	resent = true
	if last.MessageId == "" {
		return fmt.Errorf("the ledger never received %s's event", out.relayKilled)
	}
	attrs := map[string]sqstypes.MessageAttributeValue{}
	for k, v := range last.MessageAttributes {
		attrs[k] = sqstypes.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: v.StringValue}
	}
	if _, err := st.sqs.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(eventsURL), MessageBody: aws.String(last.Body), MessageAttributes: attrs,
		MessageGroupId: aws.String(last.Attributes["MessageGroupId"]), MessageDeduplicationId: aws.String("after-the-window-" + last.MessageId),
	}); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   sent %s's event again with another deduplication ID, as SQS takes a resend after its 5-minute window:\n", out.relayKilled)
	if err := run(); err != nil {
		return err
	}
	rows, err := dynamodb.NewFromConfig(d.moto.AWSConfig()).Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(st.outputs["LedgerTableName"])})
	if err != nil {
		return err
	}
	for _, item := range rows.Items {
		if v, ok := item["id"].(*types.AttributeValueMemberS); ok {
			out.entries = append(out.entries, strings.TrimPrefix(v.Value, "entry#"))
		}
	}
	slices.Sort(out.entries)
	return nil
}

// outcome is the outcome of the "message done" line about messageID, or
// "failed", or "" when there is none yet.
func outcome(messageID string, lines []map[string]any) string {
	for _, l := range lines {
		if l["messageId"] != messageID {
			continue
		}
		switch l["msg"] {
		case "message done":
			return fmt.Sprint(l["outcome"])
		case "message failed", "message failed permanently: sent to the dead-letter queue":
			return "failed"
		}
	}
	return ""
}

// relayMapping is what the demo reads of the relay's stream mapping.
type relayMapping struct {
	batchSize      int
	reportFailures bool
	maxRetries     int
	bisect         bool
	onFailure      string // the destination's ARN
	filter         *eventfilter.Filter
}

// deployedRelay reads the relay function and its stream mapping back from
// Lambda, as `lambdakit run -function` reads a queue's, and disables the
// mapping: this run takes its place.
func (d *demo) deployedRelay(ctx context.Context, lc *lambda.Client, name string) (deployed.Function, string, relayMapping, error) {
	var rm relayMapping
	fn, err := deployed.ReadFunction(ctx, lc, name)
	if err != nil {
		return fn, "", rm, err
	}
	var ms []lambdatypes.EventSourceMappingConfiguration
	// moto matches FunctionName as the mapping was created with it: the
	// ARN, else the name.
	for _, ref := range []string{fn.ARN, fn.Name} {
		list, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(ref)})
		if err != nil {
			return fn, "", rm, err
		}
		if ms = list.EventSourceMappings; len(ms) > 0 {
			break
		}
	}
	if len(ms) != 1 || !strings.Contains(aws.ToString(ms[0].EventSourceArn), "/stream/") {
		return fn, "", rm, fmt.Errorf("relay %s: want one mapping on a DynamoDB stream, found %d", name, len(ms))
	}
	m := ms[0]
	if _, err := lc.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{UUID: m.UUID, Enabled: aws.Bool(false)}); err != nil {
		return fn, "", rm, err
	}
	rm.batchSize = int(aws.ToInt32(m.BatchSize))
	rm.reportFailures = slices.Contains(m.FunctionResponseTypes, lambdatypes.FunctionResponseTypeReportBatchItemFailures)
	rm.bisect = aws.ToBool(m.BisectBatchOnFunctionError)
	if m.DestinationConfig != nil && m.DestinationConfig.OnFailure != nil {
		rm.onFailure = aws.ToString(m.DestinationConfig.OnFailure.Destination)
	}
	var patterns []string
	if m.FilterCriteria != nil {
		for _, f := range m.FilterCriteria.Filters {
			patterns = append(patterns, aws.ToString(f.Pattern))
		}
	}
	if rm.filter, err = eventfilter.New(patterns...); err != nil {
		return fn, "", rm, fmt.Errorf("relay %s: its mapping's FilterCriteria: %w", name, err)
	}
	rm.maxRetries = -1
	if m.MaximumRetryAttempts != nil {
		rm.maxRetries = int(*m.MaximumRetryAttempts)
	}
	return fn, aws.ToString(m.EventSourceArn), rm, nil
}

// receiveAll receives every message of a queue, with its attributes, and
// deletes them if del is set; otherwise it hides them for a minute.
func receiveAll(ctx context.Context, client *sqs.Client, url string, del bool) ([]sqstypes.Message, error) {
	var all []sqstypes.Message
	for range 20 {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			return all, nil
		}
		for _, m := range out.Messages {
			if !del {
				continue
			}
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return nil, err
			}
		}
		all = append(all, out.Messages...)
	}
	return nil, errors.New(url + ": still messages after 20 receives")
}

// outboxSummary prints the outbox act's lines of the summary and reports
// whether they are as they must be.
func (d *demo) outboxSummary(o outboxOutcome) bool {
	ok := true
	var missing, doubled, extra []string
	for _, id := range o.charged {
		switch n := o.messages[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			doubled = append(doubled, id)
		}
	}
	for id := range o.messages {
		if !slices.Contains(o.charged, id) {
			extra = append(extra, id)
		}
	}
	fmt.Fprintf(d.out, "   outbox: %d charges in the stack's ledger, %d payment.charged events recorded by the ledger consumer in %s (%d entries)\n",
		len(o.charged), len(o.messages), plural(o.ledgerWrites, "DynamoDB write request"), len(o.entries))
	if o.filtered == 0 {
		fmt.Fprintln(d.out, "   the relay's filter passed over no stream record; want the locks at least")
		ok = false
	} else {
		fmt.Fprintf(d.out, "   relay: its mapping's filter passed over %s of the payments table (locks, releases, declines) without an invocation\n", plural(o.filtered, "stream record"))
	}
	if !slices.Equal(o.entries, o.charged) || o.ledgerWrites != len(o.entries) {
		fmt.Fprintf(d.out, "   ledger entries %v; want one per charge %v, one write request each\n", o.entries, o.charged)
		ok = false
	}
	for _, bad := range []struct {
		ids  []string
		what string
	}{{missing, "charged, and no message"}, {doubled, "more than one message"}, {extra, "a message, and no charge"}} {
		if len(bad.ids) > 0 {
			slices.Sort(bad.ids)
			fmt.Fprintf(d.out, "   %s: %s\n", bad.what, strings.Join(bad.ids, ", "))
			ok = false
		}
	}
	pid := paymentID(outboxPayment)
	switch {
	case !o.paymentKilled:
		fmt.Fprintf(d.out, "   the payment function was never killed after committing %s\n", pid)
		ok = false
	case o.chargesOf != 1:
		fmt.Fprintf(d.out, "   %s was charged %d times\n", pid, o.chargesOf)
		ok = false
	default:
		fmt.Fprintf(d.out, "   %s was charged once and published once, though the function was killed after its commit: its redelivery found the record completed\n", pid)
	}
	if o.relayKilled == "" {
		fmt.Fprintln(d.out, "   the relay was never killed after a send")
		ok = false
	} else if o.messages[o.relayKilled] == 1 {
		fmt.Fprintf(d.out, "   %s's payment.charged went out once, though the relay was killed after SQS took it: the resend carried the same deduplication ID (%.12s…) and SQS dropped it\n",
			o.relayKilled, o.dedupIDs[o.relayKilled])
	}
	if !o.resentSkipped {
		fmt.Fprintf(d.out, "   the event of %s sent again after the window was not dropped by the ledger\n", o.relayKilled)
		ok = false
	} else {
		fmt.Fprintf(d.out, "   sent again past SQS's window, %s's event was dropped by the ledger as a duplicate: no second entry\n", o.relayKilled)
	}
	return ok
}
