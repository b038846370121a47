package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/lambdakit"
)

const demoUsage = `Usage: go run ./functions/payment/demo [flags] [EVENT_FILE...]

The payment sample's story (functions/payment, template.yaml, events/): it
runs the sample function locally, without Docker, the way Lambda would:
starts moto_server (DynamoDB and SQS on a loopback port) and a sandbox
payment gateway, creates the tables as template.yaml declares them, and runs
the bootstrap binary through a local Lambda Runtime API on a story of sample
events: first delivery, redelivery, poison records, a declined card, a FIFO
batch during a gateway outage and its redelivery, a payload mismatch. Last,
it deploys template.yaml on its moto_server as 'make deploy-local' does
(this needs aws-sam-translator: 'make deps'), scales the stack's timings
down, disables its event source mapping and reads the function and the
mapping back from Lambda, as 'lambdakit run -function' does; then it
publishes events/payments-queue.jsonl to the stack's FIFO queue with a
duplicate and a poison message, and runs that mapping until the queue is
empty, killing the function once after the gateway charged a payment.
Then the outbox on the record: one more payment, the function killed after
its commit (the ledger row, completed as its idempotency record with its
payment.charged on it, in one UpdateItem) and before it answered; the
stack's relay run on the payments table's stream as its mapping would,
its FilterCriteria applied, killed once after SQS took a
message and before it answered; and the stack's ledger consumer on the
events queue, one request per entry, with one event sent again past SQS's
deduplication window. For every record it prints what
happened (charged, declined, skipped as a duplicate, failed and why), then
the charges the gateway saw, the ledger rows, where every published
message went and the events each charge published, and checks that no
payment was charged twice and every charge published exactly one event. It stops
everything it started. The function talks to the demo's moto_server only:
the shell's AWS endpoint variables are not passed to it.

With EVENT_FILE arguments it runs those files, in order, instead of the story
(and without the queue). 'go run ./functions/payment/demo local' starts the
same outside world and keeps it running for sam local or lambdakit invoke;
see its -h.

Flags:
`

// act is one step of the story.
type act struct {
	title string
	file  string // under -events; empty: redeliver the previous act's failures
	// outage makes the gateway answer this many requests with 503 first.
	outage int
}

func story() []act {
	return []act{
		{title: "First delivery: three new payments", file: "payments-new.json"},
		{title: "Redelivery: the same payments again, skipped without a charge", file: "payments-redelivered.json"},
		{title: "Poison records fail alone; valid ones in the batch are charged", file: "payments-poison.json"},
		{title: "A declined card is a business outcome: recorded, not retried", file: "payments-declined.json"},
		{title: "FIFO batch while the gateway fails one request: the rest of that group waits", file: "payments-fifo.json", outage: 1},
		{title: "SQS redelivers the failed FIFO records: charged in order"},
		{title: "Same payment_id, different amount: refused, nothing charged", file: "payments-mismatch.json"},
	}
}

// demoCommand is the payment sample's story, what the command runs
// without "local".
type demoCommand struct {
	stdio
	bootstrap string
	// relayBootstrap is the outbox relay's binary (functions/relay),
	// ledgerBootstrap the events' consumer's (functions/ledger).
	relayBootstrap, ledgerBootstrap string
	// valkey keeps the function's idempotency records in a Valkey/Redis
	// server the demo starts, instead of DynamoDB.
	valkey    bool
	template  string
	eventsDir string
	verbose   bool
	acts      []act
	story     bool // the whole story, the queue act included, rather than named files
}

// parse reads the command line and checks every file the story reads, so
// that a typo costs a line, not a moto_server start.
func (c *demoCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "demo", demoUsage, "")
	fs.StringVar(&c.bootstrap, "bootstrap", "bin/bootstrap", "the payment function's binary, built for this machine")
	fs.StringVar(&c.relayBootstrap, "relay-bootstrap", "bin/relay", "the outbox relay's binary (functions/relay), built for this machine")
	fs.StringVar(&c.ledgerBootstrap, "ledger-bootstrap", "bin/ledger", "the ledger consumer's binary (functions/ledger), built for this machine")
	fs.StringVar(&c.template, "template", "template.yaml", "the payment sample's SAM template, whose tables and queues to create")
	fs.StringVar(&c.eventsDir, "events", "events", "the folder of the story's sample events")
	fs.BoolVar(&c.verbose, "v", false, "also print the function's own log lines")
	fs.BoolVar(&c.valkey, "valkey", false, "keep the function's idempotency records in a redis-server (or valkey-server) the demo starts, through valkeystore (IDEMPOTENCY_VALKEY_ADDR); the acts through the deployed stack, whose events ride on the records in DynamoDB, are left out")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	c.acts, c.story = story(), len(rest) == 0
	for i := range c.acts {
		if c.acts[i].file != "" {
			c.acts[i].file = filepath.Join(c.eventsDir, c.acts[i].file)
		}
	}
	if !c.story {
		c.acts = nil
		for _, f := range rest {
			c.acts = append(c.acts, act{title: f, file: f})
		}
	}
	if err := checkDemoInputs(c.bootstrap, c.acts); err != nil {
		return cmdline.BadInput(err)
	}
	for flag, path := range map[string]string{"relay-bootstrap": c.relayBootstrap, "ledger-bootstrap": c.ledgerBootstrap} {
		if _, err := os.Stat(path); c.story && !c.valkey && err != nil {
			return cmdline.BadInput(fmt.Errorf("%s: %w (build it with 'make build', or name it with -%s)", flag, err, flag))
		}
	}
	return nil
}

// Run implements command.
func (c *demoCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	// ended is how the story ended when err stopped it.
	ended := func(err error) error {
		if ctx.Err() != nil {
			return cmdline.Interrupted(err)
		}
		return cmdline.Failed(err)
	}
	d := &demo{out: c.stdout, verbose: c.verbose}
	defer d.stop()
	if c.valkey {
		// Before the function starts: its environment names the server.
		srv, err := redisserver.Start("--appendonly", "yes")
		if err != nil {
			return cmdline.CannotRun(err)
		}
		d.valkey = srv
	}
	if err := d.start(ctx, c.bootstrap, c.template, c.environ); err != nil {
		return cmdline.CannotRun(err)
	}
	var previous []events.SQSMessage
	for i, a := range c.acts {
		failed, err := d.play(ctx, i+1, a, previous)
		if err != nil {
			return ended(err)
		}
		previous = failed
	}
	var queue *queueOutcome
	var ob *outboxOutcome
	if c.story && c.valkey {
		fmt.Fprintf(d.out, "\n(-valkey: the acts through the deployed stack are left out: each payment's event rides on its idempotency record on the ledger row, which a Valkey record cannot carry)\n")
	}
	if c.story && !c.valkey {
		q, st, err := d.playQueue(ctx, len(c.acts)+1, c.bootstrap, c.template, filepath.Join(c.eventsDir, queueFile), c.environ)
		if err != nil {
			return ended(err)
		}
		queue = &q
		o, err := d.playOutbox(ctx, len(c.acts)+2, st, c.bootstrap, c.relayBootstrap, c.ledgerBootstrap, c.environ)
		if err != nil {
			return ended(err)
		}
		ob = &o
	}
	if ok := d.summary(ctx, queue, ob); !ok {
		return cmdline.ErrFailed // the summary says what is wrong
	}
	return nil
}

// checkDemoInputs makes sure the bootstrap exists and every act's event
// file holds an SQS event.
func checkDemoInputs(bootstrap string, acts []act) error {
	if _, err := os.Stat(bootstrap); err != nil {
		return fmt.Errorf("bootstrap: %w (build it with 'make build', or name it with -bootstrap)", err)
	}
	for _, a := range acts {
		if a.file == "" {
			continue
		}
		raw, err := os.ReadFile(a.file)
		if err != nil {
			return fmt.Errorf("event: %w", err)
		}
		var event events.SQSEvent
		if err := json.Unmarshal(raw, &event); err != nil {
			return fmt.Errorf("event %s: want an SQS event: %w", a.file, err)
		}
	}
	return nil
}

type demo struct {
	out     io.Writer
	verbose bool
	// valkey, when set, holds the function's idempotency records.
	valkey *redisserver.Server

	*local
	runner *runtimeapi.Runner
	logs   logline.Buffer // the function's output for the current act

	// The function's metrics lines (CloudWatch Embedded Metric Format,
	// one per invocation), added up over the demo, each metric in the
	// order the lines declare it.
	metrics     map[string]float64
	metricNames []string
	invocations int
	// The messages' lines, added up: the function logs at DEBUG here
	// (newRunner), so that every message has its line.
	logged struct{ records, done, duplicates, failed int }
}

// tally adds up the counts of the metrics lines among lines, and the
// messages' own lines.
func (d *demo) tally(lines []map[string]any) {
	for _, l := range lines {
		if msg, _ := l["msg"].(string); strings.HasPrefix(msg, "message ") && l["messageId"] != nil {
			d.logged.records++
			switch {
			case msg != "message done":
				d.logged.failed++
			case l["outcome"] == "duplicate" || l["outcome"] == "replayed":
				d.logged.duplicates++
				d.logged.done++
			default:
				d.logged.done++
			}
		}
		aws, ok := l["_aws"].(map[string]any)
		if !ok {
			continue
		}
		d.invocations++
		if d.metrics == nil {
			d.metrics = map[string]float64{}
		}
		directives, _ := aws["CloudWatchMetrics"].([]any)
		for _, dir := range directives {
			defs, _ := dir.(map[string]any)["Metrics"].([]any)
			for _, def := range defs {
				m, _ := def.(map[string]any)
				name, _ := m["Name"].(string)
				if v, ok := l[name].(float64); ok && m["Unit"] == "Count" {
					if _, seen := d.metrics[name]; !seen {
						d.metricNames = append(d.metricNames, name)
					}
					d.metrics[name] += v
				}
			}
		}
	}
}

// metricsSummary prints what the messages' lines told, and the metrics the
// function reported, added up.
func (d *demo) metricsSummary() {
	if l := d.logged; l.records > 0 {
		fmt.Fprintf(d.out, "   log (a line per message at DEBUG): %d lines: %d done (%d skipped as duplicates), %d failed\n",
			l.records, l.done, l.duplicates, l.failed)
	}
	if d.invocations == 0 {
		return
	}
	var counts []string
	for _, name := range d.metricNames {
		counts = append(counts, fmt.Sprintf("%s %.0f", name, d.metrics[name]))
	}
	fmt.Fprintf(d.out, "   metrics (%d invocations' EMF lines, namespace lambdakit): %s\n", d.invocations, strings.Join(counts, ", "))
}

func (d *demo) start(ctx context.Context, bootstrap, template string, environ []string) error {
	var err error
	if d.local, err = startLocal(ctx, localConfig{template: template, listen: loopback}); err != nil {
		return err
	}
	d.runner, err = d.newRunner(bootstrap, 60*time.Second, environ) // as template.yaml
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "moto_server (DynamoDB and SQS) on %s, sandbox gateway on %s\n", d.moto.URL, d.gatewayURL)
	if d.valkey != nil {
		fmt.Fprintf(d.out, "idempotency records on %s (pid %d), through valkeystore; the ledger rows in DynamoDB\n", d.valkey.Addr, d.valkey.PID)
	}
	fmt.Fprintf(d.out, "table from %s: PaymentsTable -> %s (the ledger, with the idempotency records on its rows)\n",
		template, localTables["PaymentsTable"])
	return nil
}

// newRunner runs the payment function as SAM deploys it, with timeout,
// against the local world, its output in d.logs.
func (d *demo) newRunner(bootstrap string, timeout time.Duration, environ []string) (*runtimeapi.Runner, error) {
	return runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = "lambdakit-payment-PaymentFunction" // as SAM names it for the stack lambdakit-payment
		o.Timeout = timeout
		o.MemoryMB = 256
		o.LogFormat = "JSON"
		// DEBUG: a line for every message, which the demo reads to tell
		// what became of it. At Lambda's default level, INFO, a message
		// that succeeds has no line.
		o.LogLevel = "DEBUG"
		// The shell's endpoint variables are left out: the function talks
		// to the demo's moto_server only.
		o.Env = append(withoutEndpoints(environ), d.functionEnv(loopback)...)
		if d.valkey != nil {
			o.Env = append(o.Env, "IDEMPOTENCY_VALKEY_ADDR="+d.valkey.Addr)
		}
		o.Stdout = &d.logs
		o.Stderr = &d.logs
	})
}

// withoutEndpoints is environ without the AWS SDK's endpoint variables
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>,
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS), which would send the function's
// calls elsewhere than the demo's moto_server.
func withoutEndpoints(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "AWS_ENDPOINT_URL" || strings.HasPrefix(k, "AWS_ENDPOINT_URL_") || k == "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
	})
}

func (d *demo) stop() {
	if d.runner != nil {
		d.runner.Close()
	}
	d.local.stop()
	if d.valkey != nil {
		d.valkey.Stop()
	}
}

// play runs one act and prints each record's fate. It returns the records
// the function reported failed, as SQS would deliver them again.
func (d *demo) play(ctx context.Context, n int, a act, previous []events.SQSMessage) ([]events.SQSMessage, error) {
	var event events.SQSEvent
	source := a.file
	if a.file == "" {
		if len(previous) == 0 {
			return nil, nil
		}
		source = "the previous act's failed records"
		for _, m := range previous {
			event.Records = append(event.Records, redeliver(m))
		}
	} else {
		raw, err := os.ReadFile(a.file)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &event); err != nil {
			return nil, fmt.Errorf("%s: %w", a.file, err)
		}
	}
	fmt.Fprintf(d.out, "\n%d. %s\n   %s: %s\n", n, a.title, source, plural(len(event.Records), "record"))

	payload, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	d.gw.FailNext(a.outage)
	d.logs.Reset()
	res, err := d.runner.Invoke(ctx, payload)
	d.gw.FailNext(0)
	if err != nil {
		return nil, err
	}
	var resp events.SQSEventResponse
	switch {
	case res.Outcome == runtimeapi.OutcomeSuccess:
		if err := json.Unmarshal(res.Payload, &resp); err != nil {
			return nil, fmt.Errorf("function response %s: %w", res.Payload, err)
		}
	case res.Error != nil && res.Error.Type == reflect.TypeFor[lambdakit.AllFailedError]().Name(): // Lambda names errors by type
		// Every record failed, so the function failed the invocation and
		// the event source mapping backs off: the whole batch comes back.
		for _, m := range event.Records {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	default:
		fmt.Fprintf(d.out, "   invocation %s: %v\n", res.Outcome, res.Error)
		fmt.Fprint(d.out, indent(d.logs.String(), "   | "))
		return nil, fmt.Errorf("the function did not answer the batch (%s)", res.Outcome)
	}
	failedIDs := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failedIDs[f.ItemIdentifier] = true
	}
	awaitLines(&d.logs, event.Records)
	if d.verbose {
		fmt.Fprint(d.out, indent(d.logs.String(), "   | "))
	}
	lines := d.logs.Objects()
	d.tally(lines)
	var failed []events.SQSMessage
	for _, m := range event.Records {
		fate := recordFate(m.MessageId, failedIDs[m.MessageId], lines)
		group := ""
		if g := m.Attributes["MessageGroupId"]; g != "" {
			group = " [" + g + "]"
		}
		fmt.Fprintf(d.out, "   %-12s%-8s %s\n", paymentID(m.Body), group, fate)
		if failedIDs[m.MessageId] {
			failed = append(failed, m)
		}
	}
	fmt.Fprintf(d.out, "   response: %s  (%s, %s)\n", oneLine(res.Payload), res.Duration.Round(time.Millisecond), coldOrWarm(res))
	return failed, nil
}

// awaitLines waits, for a second at most, until the batch's closing line
// about each record ("message done", "message failed"...) has come through
// a function's output pipe into logs, which may lag behind the response it
// posted.
func awaitLines(logs *logline.Buffer, recs []events.SQSMessage) {
	for range 50 {
		told := map[string]bool{}
		for _, l := range logs.Objects() {
			msg, _ := l["msg"].(string)
			if id, ok := l["messageId"].(string); ok && strings.HasPrefix(msg, "message ") {
				told[id] = true
			}
		}
		// The metrics line comes last, after the records' lines.
		all := slices.ContainsFunc(logs.Objects(), func(l map[string]any) bool { return l["_aws"] != nil })
		for _, m := range recs {
			all = all && told[m.MessageId]
		}
		if all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func oneLine(payload []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, payload) != nil {
		return string(payload)
	}
	return buf.String()
}

// recordFate tells what happened to one record from the function's log lines.
func recordFate(messageID string, failed bool, lines []map[string]any) string {
	for _, l := range lines {
		if l["messageId"] != messageID {
			continue
		}
		switch l["msg"] {
		case "message failed":
			if failed {
				return "FAILED     " + fmt.Sprint(l["reason"])
			}
		case "message failed permanently: sent to the dead-letter queue":
			return "to the DLQ " + fmt.Sprint(l["reason"])
		case "message done":
			// The sample adds the payment's fields to the batch's
			// line for the record (lambdakit.AddLogAttrs).
			switch {
			case l["outcome"] == "duplicate" || l["outcome"] == "replayed":
				return "skipped    duplicate, gateway not called"
			case l["payment"] == "charged":
				return "charged    " + fmt.Sprint(l["charge_id"])
			case l["payment"] == "declined":
				return "declined   " + fmt.Sprint(l["decline_reason"])
			}
		}
	}
	if failed {
		return "FAILED"
	}
	return "ok"
}

// summary checks the gateway and the ledger, and the queue act's outcome
// when it ran.
func (d *demo) summary(ctx context.Context, queue *queueOutcome, ob *outboxOutcome) bool {
	charges := d.gw.Charges()
	perPayment := map[string]int{}
	for _, c := range charges {
		perPayment[c.PaymentID]++
	}
	// The ledgers: the local table of the acts, and the stack's of the
	// queue act.
	ledgers := []string{localTables["PaymentsTable"]}
	if queue != nil {
		ledgers = append(ledgers, queue.ledger)
	}
	fmt.Fprintf(d.out, "\nSummary\n   gateway: %d requests, %d charges for %d payments\n", d.gw.Requests(), len(charges), len(perPayment))
	byStatus := map[string]int{}
	for _, table := range ledgers {
		out, err := d.db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			fmt.Fprintf(d.out, "   reading the ledger %s: %v\n", table, err)
			return false
		}
		here := map[string]int{}
		for _, item := range out.Items {
			if s, ok := item["status"].(*types.AttributeValueMemberS); ok {
				here[s.Value]++
				byStatus[s.Value]++
			}
		}
		var statuses []string
		for s, n := range here {
			statuses = append(statuses, fmt.Sprintf("%s %d", s, n))
		}
		sort.Strings(statuses)
		fmt.Fprintf(d.out, "   ledger (%s): %d rows: %s\n", table, len(out.Items), strings.Join(statuses, ", "))
	}
	d.metricsSummary()
	ok := true
	for id, n := range perPayment {
		if n > 1 {
			fmt.Fprintf(d.out, "   %s was charged %d times\n", id, n)
			ok = false
		}
	}
	if byStatus["CHARGED"] != len(perPayment) { // DECLINED rows have no charge
		fmt.Fprintf(d.out, "   %d CHARGED rows for %d charged payments\n", byStatus["CHARGED"], len(perPayment))
		ok = false
	}
	if queue != nil && !d.queueSummary(*queue) {
		ok = false
	}
	if ob != nil && !d.outboxSummary(*ob) {
		ok = false
	}
	if d.valkey != nil {
		n, err := d.valkey.Do("DBSIZE")
		fmt.Fprintf(d.out, "   idempotency records on %s: %s keys%s\n", d.valkey.Addr, n, errOrEmpty(err))
	}
	if ok {
		fmt.Fprintln(d.out, "   every payment was charged at most once, and every charge is in the ledger")
	}
	return ok
}

// redeliver returns m as SQS delivers it again after a failure.
func redeliver(m events.SQSMessage) events.SQSMessage {
	attrs := map[string]string{}
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	var count int
	fmt.Sscan(attrs["ApproximateReceiveCount"], &count)
	attrs["ApproximateReceiveCount"] = fmt.Sprint(count + 1)
	m.Attributes = attrs
	m.ReceiptHandle += "-again"
	return m
}

func paymentID(body string) string {
	var p struct {
		PaymentID string `json:"payment_id"`
	}
	if json.Unmarshal([]byte(body), &p) != nil || p.PaymentID == "" {
		return "(no id)"
	}
	return p.PaymentID
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func coldOrWarm(r runtimeapi.Result) string {
	if r.InitDuration > 0 {
		return "cold start, init " + r.InitDuration.Round(time.Millisecond).String()
	}
	return "warm"
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if line != "" {
			b.WriteString(prefix + line + "\n")
		}
	}
	return b.String()
}

// errOrEmpty is err as text, or "" when nil.
func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}
