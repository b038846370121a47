package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samdeploy"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const upUsage = `Usage: lambdakit up -stack-name NAME [flags]

Runs every event source mapping of a stack deployed on a local AWS by
'lambdakit deploy-local' at once (SQS queues, DynamoDB and Kinesis streams),
each as 'lambdakit run -function' runs one: warm local Lambdas with the
deployed function's settings and environment. Each function's bootstrap is
built for this machine from its CodeUri in -template (a Go main package) or
found there (CodeUri/bootstrap); a function of another runtime is named and
skipped. The deployed mappings are disabled, since up plays them. Output
lines start with the function's logical ID; every -status interval a line
per mapping tells what is in flight, done, failed and gone to the DLQ.
Ctrl-C stops everything, the functions' processes included. More:
docs/local-tooling.md.

Flags:
`

const upExitStatus = `
Exit status:
  0    stopped by Ctrl-C or SIGTERM (the functions' failures are in the status lines)
  1    a mapping stopped on its own
  2    usage error, or an env file or template that cannot be read
  3    no local AWS, no such stack, or a bootstrap that cannot be built or started
`

// upCommand is 'lambdakit up': a deployed stack's mappings, all at once.
type upCommand struct {
	stdio
	stackName, endpoint, template, envFile string
	concurrency                            int
	statusEvery                            time.Duration
}

func (c *upCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "up", upUsage, upExitStatus)
	fs.StringVar(&c.stackName, "stack-name", "", "the deployed stack's `name`")
	fs.StringVar(&c.endpoint, "endpoint", "", "the local AWS's `URL`, on loopback (default $AWS_ENDPOINT_URL)")
	fs.StringVar(&c.template, "template", "template.yaml", "the SAM `template` the stack was deployed from, whose CodeUri folders hold the functions' code")
	fs.StringVar(&c.envFile, "env-file", "", "extra environment variables from `FILE` for every function, in the JSON shape of 'sam local invoke --env-vars' (a section per logical ID, or Parameters for all)")
	fs.IntVar(&c.concurrency, "concurrency", esm.DefaultConcurrency, "the most batches in flight at once per queue mapping, each in a process of its own")
	fs.DurationVar(&c.statusEvery, "status", 5*time.Second, "how often to print the status lines of the mappings whose counts changed")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if c.endpoint == "" {
		c.endpoint = lookup(c.environ, "AWS_ENDPOINT_URL")
	}
	switch {
	case len(rest) > 0:
		return fs.UsageError("unexpected arguments %q", rest)
	case c.stackName == "":
		return fs.UsageError("-stack-name: want the name of a stack deployed with deploy-local")
	case c.endpoint == "":
		return fs.UsageError("no -endpoint and no AWS_ENDPOINT_URL: name the local AWS the stack is deployed on")
	case c.statusEvery <= 0:
		return fs.UsageError("-status %v: want a positive duration", c.statusEvery)
	}
	if err := samdeploy.CheckEndpoint(c.endpoint); err != nil {
		return fs.UsageError("-endpoint: %v", err)
	}
	return nil
}

// upMapping is one mapping up runs: the arguments of its 'run'.
type upMapping struct {
	logicalID string
	args      []string
	status    *mappingStatus
}

// Run implements command.
func (c *upCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	// Every call of up and of the functions goes to the local AWS, with
	// static test credentials, whatever this shell says: the runs read
	// this process's environment, as the SDK does.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_ENDPOINT_URL_") || k == "AWS_PROFILE" || k == "AWS_SESSION_TOKEN" {
			os.Unsetenv(k)
		}
	}
	for _, kv := range motoserver.Env(c.endpoint) {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	c.environ = os.Environ()
	stderr := logline.Writer(c.stderr)
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "lambdakit up: "+format+"\n", args...) }

	stack, err := samdeploy.ReadStack(ctx, c.endpoint, c.stackName)
	if err != nil {
		return samdeploy.CommandError(ctx, err)
	}
	dir, err := os.MkdirTemp("", "lambdakit-up-")
	if err != nil {
		return cmdline.CannotRun(err)
	}
	defer os.RemoveAll(dir)
	mappings, err := c.mappings(ctx, dir, stderr, logf)
	if err != nil {
		return err
	}
	if len(mappings) == 0 {
		return cmdline.CannotRun(fmt.Errorf("stack %s has no event source mapping of a function lambdakit runs", c.stackName))
	}

	if err := stack.Print(c.stdout, c.endpoint); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "The local AWS, for a shell:\n%s", shellLines(c.endpoint, stack.Region))
	fmt.Fprintf(c.stdout, "Running %s; Ctrl-C stops them:\n", cmdline.Count(len(mappings), "mapping", "mappings"))
	for _, m := range mappings {
		fmt.Fprintf(c.stdout, "  %s\n", m.status.name)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type ended struct {
		m   upMapping
		err error
	}
	results := make(chan ended, len(mappings))
	for _, m := range mappings {
		run := &runCommand{stdio: stdio{stdin: strings.NewReader(""), stdout: io.Discard,
			stderr: logline.Prefixed(stderr, m.logicalID+": "), environ: c.environ}, status: m.status}
		go func() { results <- ended{m, run.Run(ctx, m.args)} }()
	}
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		printStatus(ctx, stderr, mappings, c.statusEvery)
	}()

	var firstErr error
	stopped := false
	for range mappings {
		r := <-results
		if !stopped {
			stopped = true
			if ctx.Err() == nil {
				// A mapping that stops on its own stops the others.
				err := r.err
				if err == nil {
					err = errors.New("the source is gone")
				}
				firstErr = fmt.Errorf("%s stopped: %w", r.m.status.name, err)
				logf("%v; stopping the others", firstErr)
			}
			cancel()
		}
	}
	<-statusDone
	for _, m := range mappings {
		fmt.Fprintf(stderr, "lambdakit up: %s\n", m.status.line())
	}
	if firstErr != nil {
		return cmdline.Failed(firstErr)
	}
	return nil
}

// mappings reads the stack's functions and their mappings, builds each
// runnable function's bootstrap into dir, disables the deployed mappings,
// and returns the runs to start. Build output goes to stderr.
func (c *upCommand) mappings(ctx context.Context, dir string, stderr io.Writer, logf func(string, ...any)) ([]upMapping, error) {
	cfg := motoserver.Config(c.endpoint)
	res, err := cloudformation.NewFromConfig(cfg).DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(c.stackName)})
	if err != nil {
		return nil, cmdline.CannotRun(fmt.Errorf("the resources of stack %s: %w", c.stackName, err))
	}
	fns, err := samtemplate.Functions(c.template)
	if err != nil {
		return nil, cmdline.BadInput(err)
	}
	lc, sc := lambda.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	var out []upMapping
	for _, r := range res.StackResources {
		if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" {
			continue
		}
		id, name := aws.ToString(r.LogicalResourceId), aws.ToString(r.PhysicalResourceId)
		fn, err := samtemplate.FindFunction(fns, id)
		if err != nil {
			logf("%s: skipped: %s has no AWS::Serverless::Function %s, whose CodeUri to build", id, c.template, id)
			continue
		}
		if why := unrunnable(fn.Runtime); why != "" {
			logf("%s: skipped: %s", id, why)
			continue
		}
		ms, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(name)})
		if err != nil {
			return nil, cmdline.CannotRun(fmt.Errorf("the mappings of %s: %w", name, err))
		}
		if len(ms.EventSourceMappings) == 0 {
			continue
		}
		logf("%s: building its bootstrap for this machine", id)
		bootstrap, err := samdeploy.BuildForHost(ctx, c.template, id, dir, logline.Prefixed(stderr, id+": "))
		if err != nil {
			return nil, cmdline.CannotRun(err)
		}
		for _, m := range ms.EventSourceMappings {
			um, err := c.mapping(ctx, sc, id, name, bootstrap, m)
			if err != nil {
				return nil, err
			}
			if aws.ToString(m.State) != "Disabled" {
				// Two consumers of one source would race; up plays it.
				if _, err := lc.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{UUID: m.UUID, Enabled: aws.Bool(false)}); err != nil {
					return nil, cmdline.CannotRun(fmt.Errorf("disable the deployed mapping %s: %w", aws.ToString(m.UUID), err))
				}
				logf("%s: disabled the deployed mapping %s: up plays it", id, aws.ToString(m.UUID))
			}
			out = append(out, um)
		}
	}
	slices.SortFunc(out, func(a, b upMapping) int { return strings.Compare(a.status.name, b.status.name) })
	return out, nil
}

// mapping returns the run of the deployed mapping m of the function name
// (logical ID id).
func (c *upCommand) mapping(ctx context.Context, sc *sqs.Client, id, name, bootstrap string, m lambdatypes.EventSourceMappingConfiguration) (upMapping, error) {
	source := aws.ToString(m.EventSourceArn)
	a, err := arn.Parse(source)
	if err != nil {
		return upMapping{}, cmdline.CannotRun(fmt.Errorf("mapping %s: source %q: %w", aws.ToString(m.UUID), source, err))
	}
	args := []string{"-function", name, "-logical-id", id}
	if c.envFile != "" {
		args = append(args, "-env-file", c.envFile)
	}
	st := &mappingStatus{lost: "to the DLQ"}
	switch a.Service {
	case "sqs":
		q, err := sc.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(a.Resource), QueueOwnerAWSAccountId: aws.String(a.AccountID)})
		if err != nil {
			return upMapping{}, cmdline.CannotRun(fmt.Errorf("the queue of mapping %s: %w", aws.ToString(m.UUID), err))
		}
		st.name = fmt.Sprintf("%s <- queue %s", id, a.Resource)
		args = append(args, "-queue", aws.ToString(q.QueueUrl), "-concurrency", strconv.Itoa(c.concurrency))
	case "dynamodb", "kinesis":
		st.name, st.lost = fmt.Sprintf("%s <- %s stream %s", id, a.Service, a.Resource), "discarded"
		retries := -1 // as long as the records are in the stream
		if m.MaximumRetryAttempts != nil {
			retries = int(*m.MaximumRetryAttempts)
		}
		args = append(args, "-stream", source, "-batch-size", strconv.Itoa(int(aws.ToInt32(m.BatchSize))), "-max-retry-attempts", strconv.Itoa(retries))
		if aws.ToBool(m.BisectBatchOnFunctionError) {
			args = append(args, "-bisect")
		}
		if m.DestinationConfig != nil && m.DestinationConfig.OnFailure != nil && aws.ToString(m.DestinationConfig.OnFailure.Destination) != "" {
			args = append(args, "-on-failure", aws.ToString(m.DestinationConfig.OnFailure.Destination))
		}
		if slices.Contains(m.FunctionResponseTypes, lambdatypes.FunctionResponseTypeReportBatchItemFailures) {
			args = append(args, "-report-batch-item-failures")
		}
		if m.FilterCriteria != nil {
			for _, f := range m.FilterCriteria.Filters {
				args = append(args, "-filter", aws.ToString(f.Pattern))
			}
		}
	default:
		return upMapping{}, cmdline.CannotRun(fmt.Errorf("mapping %s of %s: source %s: lambdakit runs SQS, DynamoDB and Kinesis mappings", aws.ToString(m.UUID), id, source))
	}
	return upMapping{logicalID: id, args: append(args, bootstrap), status: st}, nil
}

// printStatus prints, every interval until ctx ends, the status line of
// each mapping whose counts changed.
func printStatus(ctx context.Context, w io.Writer, mappings []upMapping, every time.Duration) {
	last := make([]string, len(mappings))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, m := range mappings {
			if l := m.status.line(); l != last[i] {
				last[i] = l
				fmt.Fprintf(w, "lambdakit up: %s\n", l)
			}
		}
	}
}

// mappingStatus counts a mapping's work for up's status lines. Its
// methods do nothing on nil, as in 'run'.
type mappingStatus struct {
	name     string // the function and its source
	lost     string // what records given up on are called: "to the DLQ", "discarded"
	inFlight atomic.Int64
	mu       sync.Mutex
	done     int // records the function succeeded with
	failed   int // records left for another delivery
	gone     int // records given up on: moved to the DLQ, or discarded
}

// track returns inv, counting the invocations in flight.
func (s *mappingStatus) track(inv esm.Invoker) esm.Invoker {
	if s == nil {
		return inv
	}
	return &trackedInvoker{inv: inv, s: s}
}

type trackedInvoker struct {
	inv esm.Invoker
	s   *mappingStatus
}

func (t *trackedInvoker) Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	t.s.inFlight.Add(1)
	defer t.s.inFlight.Add(-1)
	return t.inv.Invoke(ctx, event, optFns...)
}

func (s *mappingStatus) queueBatch(b esm.BatchResult) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done += len(b.Deleted)
	s.failed += len(b.Left) - b.ToDeadLetterQueue
	s.gone += b.ToDeadLetterQueue
}

func (s *mappingStatus) streamBatch(b esm.StreamBatchResult) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(b.Discarded) > 0:
		s.gone += len(b.Discarded)
	case b.Err != nil || b.Bisected:
		s.failed += len(b.Records)
	case b.RetryFrom != "":
		i := slices.IndexFunc(b.Records, func(r esm.StreamRecord) bool { return r.SequenceNumber() == b.RetryFrom })
		s.done += max(i, 0)
		s.failed += len(b.Records) - max(i, 0)
	default:
		s.done += len(b.Records)
	}
}

// line is the mapping's status line.
func (s *mappingStatus) line() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%s: %d batches in flight, %d done, %d failed, %d %s", s.name, s.inFlight.Load(), s.done, s.failed, s.gone, s.lost)
}
