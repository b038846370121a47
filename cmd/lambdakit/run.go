package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const runUsage = `Usage: lambdakit run [flags] -queue URL BOOTSTRAP
       lambdakit run [flags] -function NAME BOOTSTRAP
       lambdakit run [flags] -stream ARN BOOTSTRAP

Does locally what Lambda's SQS event source mapping does: it long-polls the
queue, builds each batch's event as Lambda does, runs BOOTSTRAP on it through
the local Runtime API of 'lambdakit invoke', and deletes the records the
function did not name in batchItemFailures (read only with
-report-batch-item-failures, as on Lambda); the rest come back after the
visibility timeout. Settings come from the flags, then -template or the
deployed function and its mapping (-function), then Lambda's defaults. With
-stream ARN it plays a DynamoDB or Kinesis stream's mapping instead (shards
in order, checkpoints, retries, -bisect, -on-failure). A queue, stream or
function on AWS needs -live. -until-empty stops once the queue is empty
(warning, once, when the queue has no redrive policy); Ctrl-C stops after
the batches in flight. Standard output gets a JSON line per batch, standard
error the function's output and a summary. Flags come before BOOTSTRAP.
More, with where it differs from Lambda: the "lambdakit run" section of
docs/local-tooling.md.

Flags:
`

const runExitStatus = `
Exit status:
  0    stopped as asked (Ctrl-C, SIGTERM or -until-empty) and every invocation
       succeeded; records the function named in batchItemFailures do not count
       as failures: that is the partial batch response at work
  1    stopped as asked, but an invocation failed as a whole (function error,
       init error, crash, timeout, or a response that fails the whole batch),
       or a delete failed
  2    usage error (a queue URL that the endpoint or region configured
       contradicts included; a queue whose VisibilityTimeout is shorter than
       the function's timeout), or an env or template file that cannot be read
  3    the queue does not exist or cannot be read, the deployed function
       -function names (or its mappings) cannot be read, or the bootstrap
       could not be started
`

// runCommand is 'lambdakit run': the SQS event source mapping, locally.
type runCommand struct {
	stdio
	flags       *cmdline.Flags
	fn          functionFlags
	queue       string
	batchSize   int
	window      time.Duration
	concurrency int
	untilEmpty  bool
	partial     bool
	shortVisOK  bool
	bootstrap   string
	// A stream's mapping instead of a queue's (see runstream.go).
	stream     string
	maxRetries int
	bisect     bool
	onFailure  string
	// filters are the patterns of -filter, or of the deployed mapping's
	// FilterCriteria; filter is them compiled.
	filters patternList
	filter  *eventfilter.Filter
	// status, when set, counts the mapping's work for 'up' (up.go).
	status *mappingStatus
}

// optionFlags names the flag behind each esm option, for messages.
var optionFlags = map[string]string{
	"queueURL":        "-queue",
	"BatchSize":       "-batch-size",
	"Window":          "-window",
	"Concurrency":     "-concurrency",
	"FunctionTimeout": "-timeout",
	// A stream's mapping (runstream.go).
	"MaximumRetryAttempts": "-max-retry-attempts",
	"OnFailure":            "-on-failure",
}

// parse reads the command line, the template or the deployed function,
// and the env file.
func (c *runCommand) parse(ctx context.Context, args []string) error {
	fs := cmdline.NewFlags(c.stderr, "run", runUsage, runExitStatus)
	c.flags = fs
	fs.StringVar(&c.queue, "queue", "", "the queue's `URL`, as SQS returns it: http://127.0.0.1:5000/123456789012/orders.fifo (required without -function; with it, chooses among the function's SQS mappings)")
	fs.IntVar(&c.batchSize, "batch-size", esm.DefaultBatchSize, "the most records per invocation (BatchSize): 1 to 10 on a FIFO queue, to 10000 on a standard one, above 10 with a -window of 1s or more; the deployed mapping's or the template's if it sets one, else Lambda's")
	fs.DurationVar(&c.window, "window", 0, "how long to gather records before invoking, standard queues only (MaximumBatchingWindowInSeconds): whole seconds, 0 to 5m (default: the deployed mapping's, else 0)")
	fs.IntVar(&c.concurrency, "concurrency", esm.DefaultConcurrency, "the most batches in flight at once, each in a process of its own (ScalingConfig.MaximumConcurrency, 2 to 1000; never taken from the template); Lambda starts with five, or the deployed mapping's MaximumConcurrency if lower")
	fs.BoolVar(&c.untilEmpty, "until-empty", false, "stop once the queue has no visible, in-flight or delayed messages")
	fs.BoolVar(&c.partial, "report-batch-item-failures", false, "read responses as partial batch responses (FunctionResponseTypes: [ReportBatchItemFailures]), as lambdakit functions answer; without it every batch the function answers is deleted, as on Lambda (default: what the deployed mapping or the template's SQS event says, else false)")
	fs.BoolVar(&c.shortVisOK, "allow-short-visibility-timeout", false, "run even if the queue's VisibilityTimeout is shorter than the function's timeout, which Lambda refuses: for tests that want a batch handed out again while it runs")
	fs.StringVar(&c.stream, "stream", "", "a DynamoDB stream's or a Kinesis data stream's `ARN`, to run its mapping instead of a queue's: records in order per shard from the oldest, partial batch responses by sequence number, retries (see 'Streams' above)")
	fs.IntVar(&c.maxRetries, "max-retry-attempts", -1, "with -stream, the retries of a failed batch before its records are discarded (MaximumRetryAttempts): 0 to 10000, or -1 for as long as they are in the stream")
	fs.BoolVar(&c.bisect, "bisect", false, "with -stream, split a batch that fails in two and deliver each half on its own, and retry exactly the rest of a batch after a partial batch response (BisectBatchOnFunctionError); splits consume no retries")
	fs.StringVar(&c.onFailure, "on-failure", "", "with -stream, the SQS queue (`URL or ARN`, at the SDK's SQS endpoint) that gets an invocation record for each batch discarded after -max-retry-attempts (DestinationConfig.OnFailure)")
	fs.Var(&c.filters, "filter", "a `pattern` of FilterCriteria, repeatable, or the whole of it as JSON ({\"Filters\":[{\"Pattern\":\"...\"}]}): records no pattern matches are deleted (a stream's: passed over) without an invocation (default: the deployed mapping's, or the template's event's)")
	c.fn.define(fs.FlagSet, "each invocation's deadline is its start plus this")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) == 0:
		return fs.UsageError("need a BOOTSTRAP")
	case len(rest) > 1:
		return fs.UsageError("want one BOOTSTRAP, got %s", strings.Join(rest, " "))
	case c.stream != "":
		c.bootstrap = rest[0]
		if err := c.compileFilter(); err != nil {
			return err
		}
		return c.parseStream(ctx, fs)
	case fs.Given()["max-retry-attempts"]:
		return fs.UsageError("-max-retry-attempts is for a stream's mapping (-stream); a queue's redrive policy bounds its retries")
	case fs.Given()["bisect"]:
		return fs.UsageError("-bisect is for a stream's mapping (-stream): SQS batches are not split")
	case fs.Given()["on-failure"]:
		return fs.UsageError("-on-failure is for a stream's mapping (-stream); a queue's failed messages go to its dead-letter queue (RedrivePolicy)")
	case c.queue == "" && c.fn.function == "":
		return fs.UsageError("-queue: want the queue's URL (or -function, a deployed function whose mapping names it)")
	case c.queue != "" && !validQueueURL(c.queue):
		return fs.UsageError("-queue %q: want http(s)://host/account/name", c.queue)
	}
	c.bootstrap = rest[0]
	// What the command line alone shows wrong is refused before any call,
	// the Lambda call of -function included.
	if err := c.fn.checkGiven(fs); err != nil {
		return err
	}
	// Zero would mean esm's default; on the command line it is a mistake.
	// esm.New checks the rest of the range.
	switch {
	case c.batchSize == 0:
		return fs.UsageError("-batch-size 0: want 1 or more")
	case c.concurrency == 0:
		return fs.UsageError("-concurrency 0: want %d to %d", esm.MinConcurrency, esm.MaxConcurrency)
	}
	if c.queue != "" {
		if err := c.checkQueue(ctx); err != nil {
			return err
		}
	}
	if err := c.fn.loadDeployed(ctx, fs, c.stdio, "run"); err != nil {
		return err
	}
	if err := c.fn.settle(fs); err != nil {
		return err
	}
	if err := c.eventFromTemplate(fs.Given()); err != nil {
		return err
	}
	if err := c.eventFromDeployed(ctx, fs.Given()); err != nil {
		return err
	}
	return c.compileFilter()
}

// compileFilter checks the filter patterns, refusing one that Lambda
// refuses or that eventfilter does not implement.
func (c *runCommand) compileFilter() error {
	f, err := eventfilter.New(c.filters...)
	if err != nil {
		return c.flags.UsageError("-filter: %v", err)
	}
	c.filter = f
	return nil
}

// patternList is -filter's value: each use adds a pattern, or the
// patterns of a whole FilterCriteria.
type patternList []string

func (l *patternList) String() string { return strings.Join(*l, " ") }

func (l *patternList) Set(s string) error {
	if patterns, err := eventfilter.ParseCriteria(s); err == nil {
		*l = append(*l, patterns...)
		return nil
	}
	*l = append(*l, s)
	return nil
}

// checkQueue refuses, before any call, a queue URL that the endpoint rule
// (see endpoint.go) refuses, a queue on AWS without -live among them:
// messages run takes are gone from the queue the deployed function's
// mapping reads, and a bootstrap run here does their work with this
// shell's credentials.
func (c *runCommand) checkQueue(ctx context.Context) error {
	if _, err := newSQSClient(ctx, c.environ, c.fn.region, c.fn.live, c.queue); err != nil {
		return asUsage(c.flags, err, cmdline.BadInput)
	}
	return nil
}

// queueRef is the queue -queue names, as a mapping's source names it: the
// URL's last two path segments, and the region of a queue on AWS.
func queueRef(queueURL string) deployed.QueueRef {
	u, err := url.Parse(queueURL)
	if err != nil {
		return deployed.QueueRef{}
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	ref := deployed.QueueRef{Name: parts[len(parts)-1]}
	if len(parts) >= 2 {
		ref.Account = parts[len(parts)-2]
	}
	if q, err := parseQueueURL(queueURL); err == nil && q.live {
		ref.Region = q.region
	}
	return ref
}

// eventFromTemplate takes the batch size, the response types and the
// filters the command line did not set from the function's SQS event in
// -template, when it has exactly one.
func (c *runCommand) eventFromTemplate(set map[string]bool) error {
	if c.fn.template == "" {
		return nil
	}
	evs, err := templateEvents(c.fn.template, samtemplate.SQSEvents, func(ev samtemplate.SQSEvent) bool { return ev.Function == c.fn.logicalID })
	if err != nil || len(evs) != 1 {
		return err
	}
	if !set["batch-size"] && evs[0].BatchSize > 0 {
		c.batchSize = evs[0].BatchSize
	}
	if !set["report-batch-item-failures"] {
		c.partial = evs[0].ReportBatchItemFailures
	}
	return c.filtersFromTemplate(set, func(f samtemplate.EventFilter) bool { return f.Name == evs[0].Name })
}

// templateEvents are the events load reads from the template at path
// that keep accepts.
func templateEvents[T any](path string, load func(string) ([]T, error), keep func(T) bool) ([]T, error) {
	all, err := load(path)
	if err != nil {
		return nil, cmdline.BadInput(fmt.Errorf("template: %w", err))
	}
	var out []T
	for _, ev := range all {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// filtersFromTemplate takes, unless -filter is given, the patterns of the
// FilterCriteria of the function's event in -template that is accepts,
// when it accepts exactly one.
func (c *runCommand) filtersFromTemplate(set map[string]bool, is func(samtemplate.EventFilter) bool) error {
	if c.fn.template == "" || set["filter"] {
		return nil
	}
	found, err := templateEvents(c.fn.template, samtemplate.EventFilters, func(f samtemplate.EventFilter) bool { return f.Function == c.fn.logicalID && is(f) })
	if err != nil {
		return err
	}
	switch len(found) {
	case 0:
	case 1:
		c.filters = found[0].Patterns
		fmt.Fprintf(c.stderr, "lambdakit run: the template's event %s: %s\n", found[0].Name, cmdline.Count(len(found[0].Patterns), "filter", "filters"))
	default:
		// Which event is this stream's cannot be told from the template
		// alone (its Stream is a reference to a resource): running with
		// no filter, or another event's, would invoke the function for
		// records Lambda would never hand it, or consume records it would.
		names := make([]string, len(found))
		for i, f := range found {
			names[i] = f.Name
		}
		return c.flags.UsageError("-template: function %s has %d %s events (%s): give the filter of the one this stream feeds with -filter (-filter '{\"Filters\":[]}' for none)",
			c.fn.logicalID, len(found), found[0].Type, strings.Join(names, ", "))
	}
	return nil
}

// eventFromDeployed takes the queue and what the command line did not set
// from the deployed function's SQS event source mapping: its only one, or
// the one of -queue.
func (c *runCommand) eventFromDeployed(ctx context.Context, set map[string]bool) error {
	d := c.fn.deployed
	if d == nil {
		return nil
	}
	ms, err := deployed.SQSMappings(ctx, c.fn.lambda, *d)
	if err != nil {
		return cmdline.CannotRun(err)
	}
	var want deployed.QueueRef
	if c.queue != "" {
		want = queueRef(c.queue)
	}
	m, err := deployed.Choose(d.ARN, ms, want)
	if err != nil {
		return c.flags.UsageError("%v", err)
	}
	if c.queue == "" {
		// The queue's URL comes from SQS, at the SDK's SQS endpoint,
		// which must be where the function was read: a function read
		// from moto_server must not have its queue looked up on AWS
		// with this shell's credentials, nor the other way round.
		client := sqs.NewFromConfig(c.fn.awsCfg, func(o *sqs.Options) { o.Region = m.QueueRegion })
		lambdaAt, sqsAt := c.fn.lambda.Options().BaseEndpoint, client.Options().BaseEndpoint
		where := endpointDescription(c.environ, "SQS", "SQS", sqsAt, m.QueueRegion)
		if onAWS(lambdaAt) != onAWS(sqsAt) {
			return c.flags.UsageError("the function was read %s, but its queue would be looked up %s: point both at one place (AWS_ENDPOINT_URL), or give the queue's URL with -queue",
				endpointDescription(c.environ, "LAMBDA", "Lambda", lambdaAt, c.fn.awsCfg.Region), where)
		}
		fmt.Fprintf(c.stderr, "lambdakit run: the URL of %s from SQS %s\n", m.QueueARN, where)
		if c.queue, err = deployed.QueueURL(ctx, client, m); err != nil {
			return cmdline.CannotRun(err)
		}
		if err := c.checkQueue(ctx); err != nil {
			return err
		}
	}
	if !set["batch-size"] && m.BatchSize > 0 {
		c.batchSize = m.BatchSize
	}
	if !set["window"] {
		c.window = m.Window
	}
	if !set["report-batch-item-failures"] {
		c.partial = m.ReportBatchItemFailures
	}
	if !set["concurrency"] && m.MaximumConcurrency > 0 {
		c.concurrency = min(c.concurrency, m.MaximumConcurrency)
	}
	if !set["filter"] {
		c.filters = m.Filters
	}
	responses := "whole-batch responses"
	if m.ReportBatchItemFailures {
		responses = "ReportBatchItemFailures"
	}
	maxConc := "none"
	if m.MaximumConcurrency > 0 {
		maxConc = strconv.Itoa(m.MaximumConcurrency)
	}
	fmt.Fprintf(c.stderr, "lambdakit run: mapping %s (%s): queue %s, batch size %d, window %v, %s, maximum concurrency %s, %s\n",
		m.UUID, m.State, c.queue, m.BatchSize, m.Window, responses, maxConc, cmdline.Count(len(m.Filters), "filter", "filters"))
	if m.State != "Disabled" {
		// Two consumers of one queue: each receive by the other raises
		// ApproximateReceiveCount, and may move messages to the DLQ.
		// (A plain moto_server's own mapping does too, without Docker to
		// run the function; the local stack's launcher stops that.)
		fmt.Fprintf(c.stderr, "lambdakit run: warning: the deployed mapping %s is %s: it consumes the queue too, and its receives count toward the redrive policy's maxReceiveCount; disable it while running here (aws lambda update-event-source-mapping --uuid %[1]s --no-enabled)\n",
			m.UUID, m.State)
	}
	return nil
}

// Run implements command.
func (c *runCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(ctx, args); err != nil {
		return err
	}
	if c.stream != "" {
		return c.runStream(ctx)
	}
	// The batches, the function's output and the signal notice write to
	// standard error from their goroutines.
	std := c.stdio
	std.stderr = logline.Writer(c.stderr)

	// Everything is checked before anything starts: flags, env file,
	// bootstrap, the AWS configuration, the mapping's options.
	region, err := c.region(std.environ)
	if err != nil {
		return err
	}
	// The queue URL names where the queue is (see endpoint.go).
	client, err := newSQSClient(ctx, std.environ, c.fn.region, c.fn.live, c.queue)
	if err != nil {
		return asUsage(c.flags, err, cmdline.BadInput)
	}
	// One Runner, one warm process, per batch in flight, as Lambda has an
	// execution environment per concurrent invocation; or per
	// -per-process-concurrency batches, each Runner then taking that many
	// at once (the Pool gives each of its invokers one at a time). Out of
	// range, -concurrency is refused by esm.New below.
	var runners []*runtimeapi.Runner
	var invokers []esm.Invoker
	defer func() {
		for _, r := range runners {
			r.Close()
		}
	}()
	perProcess := max(c.fn.perProcess, 1)
	for range (min(max(c.concurrency, 1), esm.MaxConcurrency) + perProcess - 1) / perProcess {
		r, err := c.fn.newRunner(std, c.bootstrap, region)
		if err != nil {
			return err
		}
		runners = append(runners, r)
		for range perProcess {
			invokers = append(invokers, r)
		}
	}
	var invoker esm.Invoker = esm.NewPool(invokers...)
	if len(runners) == 1 {
		invoker = runners[0]
	}
	invoker = c.status.track(invoker)

	out := &batchPrinter{fn: &c.fn, stdout: std.stdout, stderr: std.stderr, status: c.status}
	mapping, err := esm.New(client, c.queue, invoker, func(o *esm.Options) {
		o.BatchSize = c.batchSize
		o.Window = c.window
		o.Concurrency = c.concurrency
		o.UntilEmpty = c.untilEmpty
		o.ReportBatchItemFailures = c.partial
		o.OnBatch = out.batch
		o.OnWarning = func(err error) { fmt.Fprintf(std.stderr, "lambdakit run: warning: %v\n", err) }
		o.OnWaiting = func(hidden int) { printWaiting(std.stderr, hidden) }
		o.FunctionTimeout = c.fn.timeout
		o.AllowShortVisibilityTimeout = c.shortVisOK
		o.Filter = c.filter
	})
	var optErr *esm.OptionError
	switch {
	case errors.As(err, &optErr):
		return c.flags.UsageError("%s %s", firstNonEmpty(optionFlags[optErr.Option], optErr.Option), optErr.Reason)
	case err != nil:
		return cmdline.BadInput(err)
	}

	finished, noticed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(noticed)
		select {
		case <-ctx.Done():
			fmt.Fprintln(std.stderr, "lambdakit run: stopping after the batches in flight")
		case <-finished:
		}
	}()
	summary, runErr := mapping.Run(ctx)
	close(finished)
	<-noticed                       // the notice, if any, comes before the summary
	if errors.As(runErr, &optErr) { // the queue's attributes refuse the mapping: nothing ran
		return c.flags.UsageError("%s %s", firstNonEmpty(optionFlags[optErr.Option], optErr.Option), optErr.Reason)
	}
	for _, r := range runners {
		if err := r.Close(); err != nil && runErr == nil {
			runErr = fmt.Errorf("stop the function: %w", err)
		}
	}
	printSummary(std.stderr, summary, ctx.Err() != nil, runErr)
	switch {
	case out.err != nil:
		return cmdline.CannotRun(fmt.Errorf("write: %w", out.err))
	case errors.Is(runErr, esm.ErrQueue):
		return cmdline.CannotRun(runErr)
	case runErr != nil:
		return cmdline.CannotRun(errors.New(startFailure(runErr, c.bootstrap)))
	case summary.FunctionErrors+summary.InvalidResponses+summary.DeleteFailures > 0:
		return cmdline.ErrFailed // the summary says so
	}
	return nil // stopped as asked, a signal included
}

// region returns the function's region: for a queue on AWS, the queue's,
// which -region or the env file's AWS_REGION must not contradict (Lambda
// maps a queue only to a function in its region); else -region, the env
// file's, this shell's, else us-east-1.
func (c *runCommand) region(environ []string) (string, error) {
	q, err := parseQueueURL(c.queue)
	if err != nil {
		return "", asUsage(c.flags, err, cmdline.BadInput)
	}
	if !q.aws {
		return c.fn.regionOr(environ, "us-east-1"), nil
	}
	for _, r := range []struct{ name, value string }{
		{"-region", c.fn.region},
		{"AWS_REGION in the env file", lookup(c.fn.extra, "AWS_REGION")},
		{"AWS_DEFAULT_REGION in the env file", lookup(c.fn.extra, "AWS_DEFAULT_REGION")},
	} {
		if r.value != "" && r.value != q.region {
			return "", c.flags.UsageError("%s is %s, but the queue URL %s is in %s, and Lambda maps a queue only to a function in its region", r.name, r.value, c.queue, q.region)
		}
	}
	return q.region, nil
}

// batchPrinter reports each batch: a JSON line on standard output, a REPORT
// line and a line in words on standard error. esm calls it one batch at a
// time.
type batchPrinter struct {
	fn     *functionFlags
	stdout io.Writer
	stderr io.Writer
	status *mappingStatus // nil but in up
	err    error          // the first failed write to stdout
}

// runOutput is what run prints on standard output for one batch.
type runOutput struct {
	RequestID    string   `json:"requestId,omitempty"`
	Outcome      string   `json:"outcome"`
	Records      int      `json:"records"`
	Deleted      []string `json:"deleted"`
	Left         []string `json:"left"`
	ItemFailures []string `json:"batchItemFailures,omitempty"`
	Reason       string   `json:"reason,omitempty"`
}

func (p *batchPrinter) batch(b esm.BatchResult) {
	p.status.queueBatch(b)
	o := runOutput{RequestID: b.Result.RequestID, Outcome: b.Result.Outcome.String(), Records: len(b.Records),
		Deleted: nonNil(b.Deleted), Left: nonNil(b.Left), ItemFailures: b.Failed}
	var line string
	switch {
	case errors.Is(b.Err, esm.ErrNotInvoked):
		o.Outcome, o.Reason = "not invoked", "an earlier record of its FIFO group in the same receive was left"
		line = fmt.Sprintf("%s left without an invocation: %s", cmdline.Count(len(b.Records), "record", "records"), o.Reason)
	case errors.Is(b.Err, esm.ErrInvocationFailed):
		o.Reason = describe(b.Result, p.fn.timeout)
		line = fmt.Sprintf("batch of %s left whole: %s", cmdline.Count(len(b.Records), "record", "records"), o.Reason)
	case b.Err != nil:
		o.Reason = b.Err.Error()
		line = fmt.Sprintf("batch of %s left whole: %v", cmdline.Count(len(b.Records), "record", "records"), b.Err)
	default:
		line = fmt.Sprintf("batch of %s: %d deleted, %d left for redelivery", cmdline.Count(len(b.Records), "record", "records"), len(b.Deleted), len(b.Left))
		if len(b.Failed) > 0 {
			line += fmt.Sprintf(" (%d named in batchItemFailures)", len(b.Failed))
		}
	}
	if b.DeleteErr != nil {
		o.Reason = strings.TrimPrefix(o.Reason+"; ", "; ") + b.DeleteErr.Error()
	}
	if b.Result.Outcome != runtimeapi.OutcomeNone {
		report(p.stderr, p.fn, b.Result)
	}
	fmt.Fprintf(p.stderr, "lambdakit run: %s\n", line)
	if p.err == nil {
		enc, _ := json.Marshal(o) // strings and string slices only
		_, p.err = p.stdout.Write(append(enc, '\n'))
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// printSummary writes what a run did, and why it stopped.
func printSummary(w io.Writer, s esm.Summary, interrupted bool, err error) {
	why := "stopped"
	switch {
	case err != nil:
		why = "stopped on an error"
	case s.Empty:
		why = "stopped: the queue is empty"
	case interrupted:
		why = "stopped on a signal"
	}
	fmt.Fprintf(w, "lambdakit run: %s\n", why)
	rows := []summaryRow{
		{"invocations", s.Invocations, ""},
		{"records", s.Records, "received, each delivery counted"},
		{"deleted", s.Deleted, ""},
		{"filtered out", s.Filtered, "matched no -filter pattern: deleted without an invocation"},
		{"left for redelivery", s.Left - s.ToDeadLetterQueue, ""},
		{"function errors", s.FunctionErrors, "function error, init error, crash or timeout: the whole batch left"},
		{"invalid responses", s.InvalidResponses, "responses that fail the whole batch"},
		{"batchItemFailures", s.ItemFailures, "records the function reported failed"},
	}
	if s.ToDeadLetterQueue > 0 {
		rows = append(rows, summaryRow{"to the DLQ", s.ToDeadLetterQueue, "left after maxReceiveCount receives: the redrive policy moves them"})
	}
	if s.NotInvoked > 0 {
		rows = append(rows, summaryRow{"not invoked", s.NotInvoked, "FIFO records held back behind an earlier failure of their group"})
	}
	if s.Delayed > 0 {
		rows = append(rows, summaryRow{"delayed", s.Delayed, "came back later than the queue's visibility timeout: the function delayed their retry"})
	}
	if s.DeleteFailures > 0 {
		rows = append(rows, summaryRow{"delete failures", s.DeleteFailures, "records left because DeleteMessageBatch failed"})
	}
	printRows(w, rows)
}

// printWaiting says that -until-empty waits for hidden messages to come
// back, rather than looking stuck.
func printWaiting(w io.Writer, hidden int) {
	fmt.Fprintf(w, "lambdakit run: waiting out a delay: %d messages hidden until their visibility timeout ends (the queue's, or a longer one the function set to retry later); the run goes on when they come back\n", hidden)
}

// summaryRow is a line of run's summary: a count and what it counts.
type summaryRow struct {
	name string
	n    int
	note string
}

func printRows(w io.Writer, rows []summaryRow) {
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(w, "  %-20s %6d   %s\n", r.name, r.n, r.note)
		} else {
			fmt.Fprintf(w, "  %-20s %6d\n", r.name, r.n)
		}
	}
}
