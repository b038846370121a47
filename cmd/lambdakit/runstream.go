package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

// lambdakit run -stream ARN: a DynamoDB stream's or a Kinesis data
// stream's event source mapping, locally (internal/esm's StreamMapping).

// queueOnly are the flags of a queue's mapping, refused with -stream.
var queueOnly = []string{"queue", "window", "concurrency", "allow-short-visibility-timeout"}

// parseStream completes the command line of a stream's mapping. With
// -function, the function's settings and environment are the deployed
// function's, and its mapping on the stream gives the filters; with
// -template, the function's one event on such a stream does. The
// mapping's other settings come from the flags.
func (c *runCommand) parseStream(ctx context.Context, fs *cmdline.Flags) error {
	set := fs.Given()
	for _, name := range queueOnly {
		if set[name] {
			return fs.UsageError("-%s is for a queue's mapping, not a stream's (-stream)", name)
		}
	}
	a, err := arn.Parse(c.stream)
	ddb := err == nil && a.Service == "dynamodb" && strings.HasPrefix(a.Resource, "table/") && strings.Contains(a.Resource, "/stream/")
	kin := err == nil && a.Service == "kinesis" && strings.HasPrefix(a.Resource, "stream/") && len(a.Resource) > len("stream/")
	if !ddb && !kin {
		return fs.UsageError("-stream %q: want a DynamoDB stream's ARN, arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE/stream/LABEL, or a Kinesis data stream's, arn:aws:kinesis:REGION:ACCOUNT:stream/NAME", c.stream)
	}
	if c.onFailure != "" && !validQueueURL(c.onFailure) {
		if q, err := arn.Parse(c.onFailure); err != nil || q.Service != "sqs" || q.Resource == "" || strings.Contains(q.Resource, "/") {
			return fs.UsageError("-on-failure %q: want an SQS queue's URL or ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)", c.onFailure)
		}
	}
	if c.fn.region != "" && c.fn.region != a.Region {
		return fs.UsageError("-region is %s, but the stream %s is in %s", c.fn.region, c.stream, a.Region)
	}
	if !set["batch-size"] {
		c.batchSize = esm.DefaultStreamBatchSize
	}
	if err := c.fn.checkGiven(fs); err != nil {
		return err
	}
	if err := c.fn.loadDeployed(ctx, fs, c.stdio, "run"); err != nil {
		return err
	}
	if err := c.fn.settle(fs); err != nil {
		return err
	}
	kind := "DynamoDB"
	if kin {
		kind = "Kinesis"
	}
	if err := c.filtersFromTemplate(set, func(f samtemplate.EventFilter) bool { return f.Type == kind }); err != nil {
		return err
	}
	if d := c.fn.deployed; d != nil && !set["filter"] {
		m, ok, err := deployed.StreamMappingOf(ctx, c.fn.lambda, *d, c.stream)
		if err != nil {
			return cmdline.CannotRun(err)
		}
		if ok {
			c.filters = m.Filters
			fmt.Fprintf(c.stderr, "lambdakit run: mapping %s (%s) on the stream: %s\n", m.UUID, m.State, cmdline.Count(len(m.Filters), "filter", "filters"))
		}
	}
	return c.compileFilter()
}

// streamOutput is what run prints on standard output for a stream's batch.
type streamOutput struct {
	RequestID string   `json:"requestId,omitempty"`
	Outcome   string   `json:"outcome"`
	Shard     string   `json:"shard"`
	Records   int      `json:"records"`
	First     string   `json:"first"`
	Last      string   `json:"last"`
	RetryFrom string   `json:"retryFrom,omitempty"`
	Bisected  bool     `json:"bisected,omitempty"`
	Discarded []string `json:"discarded,omitempty"`
	// Sent is the ID of the message that took the discarded records'
	// invocation record to the on-failure destination.
	Sent   string `json:"sent,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// runStream runs the stream's mapping until it is empty (-until-empty) or
// a signal stops it.
func (c *runCommand) runStream(ctx context.Context) error {
	std := c.stdio
	std.stderr = logline.Writer(c.stderr)
	a, _ := arn.Parse(c.stream) // checked by parseStream
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(a.Region))
	if err != nil {
		return cmdline.CannotRun(fmt.Errorf("AWS configuration: %w", err))
	}
	// The two kinds of stream differ only in their client.
	var at *string
	var newMapping func(esm.Invoker, ...func(*esm.StreamOptions)) (*esm.StreamMapping, error)
	service, display := "DYNAMODB_STREAMS", "DynamoDB Streams"
	if a.Service == "kinesis" {
		client := kinesis.NewFromConfig(cfg)
		at, service, display = client.Options().BaseEndpoint, "KINESIS", "Kinesis"
		newMapping = func(inv esm.Invoker, optFns ...func(*esm.StreamOptions)) (*esm.StreamMapping, error) {
			return esm.NewKinesisStream(client, c.stream, inv, optFns...)
		}
	} else {
		client := dynamodbstreams.NewFromConfig(cfg)
		at = client.Options().BaseEndpoint
		newMapping = func(inv esm.Invoker, optFns ...func(*esm.StreamOptions)) (*esm.StreamMapping, error) {
			return esm.NewStream(client, c.stream, inv, optFns...)
		}
	}
	// Reading a stream takes nothing from it, but the bootstrap run here
	// would do each record's work (an outbox relay would send real
	// messages) with this shell's credentials.
	if err := checkLive(ctx, std.environ, c.fn.live, "the stream "+c.stream, service, at, a.Region, c.stream); err != nil {
		return asUsage(c.flags, err, cmdline.BadInput)
	}
	fmt.Fprintf(std.stderr, "lambdakit run: stream %s %s\n", c.stream, endpointDescription(std.environ, service, display, at, a.Region))
	dest, err := c.onFailureDestination(ctx, cfg)
	if err != nil {
		return err
	}

	runner, err := c.fn.newRunner(std, c.bootstrap, a.Region)
	if err != nil {
		return err
	}
	defer runner.Close()
	p := &streamPrinter{fn: &c.fn, stdout: std.stdout, stderr: std.stderr, status: c.status}
	mapping, err := newMapping(c.status.track(runner), func(o *esm.StreamOptions) {
		o.BatchSize = c.batchSize
		o.ReportBatchItemFailures = c.partial
		o.MaximumRetryAttempts = c.maxRetries
		o.BisectBatchOnFunctionError = c.bisect
		o.OnFailure = dest
		o.FunctionARN = runtimeapi.DefaultFunctionARN(a.Region, firstNonEmpty(c.fn.functionName, defaultFunctionName))
		if c.fn.deployed != nil {
			o.FunctionARN = c.fn.deployed.ARN
		}
		o.UntilEmpty = c.untilEmpty
		o.Region = a.Region
		o.OnBatch = p.batch
		o.Filter = c.filter
	})
	var optErr *esm.OptionError
	switch {
	case errors.As(err, &optErr):
		return c.flags.UsageError("%s %s", firstNonEmpty(optionFlags[optErr.Option], optErr.Option), optErr.Reason)
	case err != nil:
		return cmdline.BadInput(err)
	}
	sum, runErr := mapping.Run(ctx)
	if err := runner.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("stop the function: %w", err)
	}
	why := "stopped"
	switch {
	case runErr != nil:
		why = "stopped on an error"
	case sum.Empty:
		why = "stopped: the stream has no record past its checkpoints"
	case ctx.Err() != nil:
		why = "stopped on a signal"
	}
	fmt.Fprintf(std.stderr, "lambdakit run: %s\n", why)
	printRows(std.stderr, []summaryRow{
		{"invocations", sum.Invocations, ""},
		{"records", sum.Records, "delivered, each delivery counted"},
		{"filtered out", sum.Filtered, "matched no -filter pattern: passed over without an invocation"},
		{"retries", sum.Retries, "batches delivered again from a checkpoint"},
		{"failed batches", p.failed, "function error, init error, crash, timeout or an invalid answer"},
		{"bisections", sum.Bisections, "failed batches split in two (-bisect)"},
		{"discarded", sum.Discarded, "records given up on after -max-retry-attempts"},
		{"sent", sum.Sent, "invocation records sent to the on-failure destination (-on-failure)"},
	})
	for _, s := range p.sent {
		fmt.Fprintf(std.stderr, "  sent %s to %s: %s records %s to %s (%d)\n", s.id, dest.QueueURL, s.info.ShardID, s.info.StartSequenceNumber, s.info.EndSequenceNumber, s.info.BatchSize)
	}
	switch {
	case errors.Is(runErr, esm.ErrDestination):
		return cmdline.CannotRun(runErr)
	case p.err != nil:
		return cmdline.CannotRun(fmt.Errorf("write: %w", p.err))
	case errors.Is(runErr, esm.ErrStream):
		return cmdline.CannotRun(runErr)
	case runErr != nil:
		return cmdline.CannotRun(errors.New(startFailure(runErr, c.bootstrap)))
	case p.failed > 0 || sum.Discarded > 0:
		return cmdline.ErrFailed
	}
	return nil
}

// streamPrinter reports each batch of a stream's mapping.
type streamPrinter struct {
	fn     *functionFlags
	stdout io.Writer
	stderr io.Writer
	failed int // batches that failed as a whole
	sent   []sentRecord
	status *mappingStatus // nil but in up
	err    error          // the first failed write to stdout
}

// sentRecord is an invocation record sent to the on-failure destination.
type sentRecord struct {
	id   string // the SQS message's
	info *esm.StreamBatchInfo
}

func (p *streamPrinter) batch(b esm.StreamBatchResult) {
	p.status.streamBatch(b)
	o := streamOutput{RequestID: b.Result.RequestID, Outcome: b.Result.Outcome.String(), Shard: b.Shard, Records: len(b.Records),
		First: b.Records[0].SequenceNumber(), Last: b.Records[len(b.Records)-1].SequenceNumber(), RetryFrom: b.RetryFrom,
		Bisected: b.Bisected, Sent: b.SentMessageID}
	for _, r := range b.Discarded {
		o.Discarded = append(o.Discarded, r.SequenceNumber())
	}
	line := fmt.Sprintf("batch of %s from %s", cmdline.Count(len(b.Records), "record", "records"), o.First)
	switch {
	case b.Err != nil:
		p.failed++
		o.Reason = b.Err.Error()
		if errors.Is(b.Err, esm.ErrInvocationFailed) && b.Result.Outcome.String() != "success" {
			o.Reason = describe(b.Result, p.fn.timeout)
		}
		line += ": failed whole (" + o.Reason + ")"
	case b.RetryFrom != "":
		line += ": the function named " + b.RetryFrom + " in batchItemFailures"
	default:
		line += ": done"
	}
	switch {
	case b.Bisected:
		half := len(b.Records) / 2
		line += fmt.Sprintf("; split in two: %d and %d records", half, len(b.Records)-half)
	case len(b.Discarded) > 0:
		line += fmt.Sprintf("; %s discarded after delivery %d", cmdline.Count(len(b.Discarded), "record", "records"), b.Attempt)
		if b.Sent != nil {
			line += "; invocation record sent as message " + b.SentMessageID
			info := b.Sent.DDBStreamBatchInfo
			if info == nil {
				info = b.Sent.KinesisBatchInfo
			}
			p.sent = append(p.sent, sentRecord{id: b.SentMessageID, info: info})
		}
	case b.RetryFrom != "":
		line += "; read again from " + b.RetryFrom
	}
	report(p.stderr, p.fn, b.Result)
	fmt.Fprintf(p.stderr, "lambdakit run: %s\n", line)
	if p.err == nil {
		enc, _ := json.Marshal(o) // strings and numbers only
		_, p.err = p.stdout.Write(append(enc, '\n'))
	}
}

// onFailureDestination returns the queue -on-failure names, at the SDK's
// SQS endpoint, or nil without -on-failure. An ARN is looked up with
// GetQueueUrl.
func (c *runCommand) onFailureDestination(ctx context.Context, cfg aws.Config) (*esm.SQSDestination, error) {
	if c.onFailure == "" {
		return nil, nil
	}
	if validQueueURL(c.onFailure) {
		// The URL names where the queue is, by the rule of endpoint.go.
		client, err := newSQSClient(ctx, c.environ, cfg.Region, c.fn.live, c.onFailure)
		if err != nil {
			return nil, asUsage(c.flags, err, cmdline.BadInput)
		}
		return &esm.SQSDestination{Client: client, QueueURL: c.onFailure}, nil
	}
	q, _ := arn.Parse(c.onFailure) // checked by parseStream
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.Region = q.Region })
	if err := checkLive(ctx, c.environ, c.fn.live, "the -on-failure queue "+c.onFailure, "SQS", client.Options().BaseEndpoint, q.Region, ""); err != nil {
		return nil, asUsage(c.flags, err, cmdline.BadInput)
	}
	out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q.Resource), QueueOwnerAWSAccountId: aws.String(q.AccountID)})
	if err != nil {
		return nil, cmdline.CannotRun(fmt.Errorf("-on-failure %s: %w", c.onFailure, err))
	}
	return &esm.SQSDestination{Client: client, QueueURL: aws.ToString(out.QueueUrl)}, nil
}
