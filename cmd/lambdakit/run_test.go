package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

func TestRunUsageErrors(t *testing.T) {
	_, echo := binaries(t)
	// None of these gets as far as a request; if one did, it would meet a
	// dead loopback port with test credentials, and nothing else.
	env := awsEnv("SQS", deadEndpoint)
	const (
		queue = "http://127.0.0.1:1/123456789012/orders"
		fifo  = "http://127.0.0.1:1/123456789012/orders.fifo"
	)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no bootstrap", []string{"run", "-queue", queue}, "need a BOOTSTRAP"},
		{"no queue", []string{"run", echo}, "-queue: want the queue's URL"},
		{"flags after the bootstrap", []string{"run", "-queue", queue, echo, "-until-empty"}, "flag -until-empty after the arguments"},
		{"two bootstraps", []string{"run", "-queue", queue, echo, echo}, "want one BOOTSTRAP"},
		{"unknown flag", []string{"run", "-batch", "5", "-queue", queue, echo}, "flag provided but not defined: -batch"},
		{"queue not a URL", []string{"run", "-queue", "orders", echo}, `-queue "orders": want http(s)://host/account/name`},
		{"FIFO batch above 10", []string{"run", "-queue", fifo, "-batch-size", "11", echo}, "-batch-size 11: a FIFO queue takes 1 to 10"},
		{"window on a FIFO queue", []string{"run", "-queue", fifo, "-window", "1s", echo}, "-window 1s: FIFO queues take no batching window"},
		{"big batch without a window", []string{"run", "-queue", queue, "-batch-size", "100", echo}, "-batch-size 100: above 10 records"},
		{"no concurrency", []string{"run", "-queue", queue, "-concurrency", "0", echo}, "-concurrency 0: want 2 to 1000"},
		{"concurrency 1, below Lambda's least", []string{"run", "-queue", queue, "-concurrency", "1", echo}, "-concurrency 1: want 2 to 1000"},
		{"too much concurrency", []string{"run", "-queue", queue, "-concurrency", "1001", echo}, "-concurrency 1001: want 2 to 1000"},
		{"a window in fractions of a second", []string{"run", "-queue", queue, "-window", "1500ms", echo}, "-window 1.5s: want whole seconds, 0 to 5m0s"},
		{"no batch", []string{"run", "-queue", queue, "-batch-size", "0", echo}, "-batch-size 0: want 1 or more"},
		{"no invocations per process", []string{"run", "-queue", queue, "-per-process-concurrency", "0", echo}, "-per-process-concurrency 0: want 1 or more"},
		{"negative invocations per process", []string{"run", "-queue", queue, "-per-process-concurrency", "-2", echo}, "-per-process-concurrency -2: want 1 or more"},
		{"bad timeout", []string{"run", "-queue", queue, "-timeout", "-1s", echo}, "-timeout -1s"},
		{"missing bootstrap", []string{"run", "-queue", queue, filepath.Join(t.TempDir(), "nope")}, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lambdakit(t, env, tt.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, tt.wantErr)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q; want nothing", r.stdout)
			}
		})
	}

	r := lambdakit(t, env, "run", "-h")
	for _, want := range []string{"Usage: lambdakit run", "-queue URL", "-batch-size", "-window", "-concurrency", "-until-empty", "-env-file FILE", "Exit status:"} {
		if r.code != 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("run -h: exit status %d, does not mention %q:\n%s", r.code, want, r.stderr)
		}
	}
}

// runOutput is a line of run's standard output.
type runOutput struct {
	RequestID    string   `json:"requestId"`
	Outcome      string   `json:"outcome"`
	Records      int      `json:"records"`
	Deleted      []string `json:"deleted"`
	Left         []string `json:"left"`
	ItemFailures []string `json:"batchItemFailures"`
	Reason       string   `json:"reason"`
}

// TestRunQueue runs the command on queues on one moto_server.
func TestRunQueue(t *testing.T) {
	srv := moto.Server(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	client := sqs.NewFromConfig(moto.Config(t))
	env := awsEnv("SQS", srv.URL)

	queue := func(t *testing.T, bodies ...string) string {
		t.Helper()
		return queueWith(t, client, 1, bodies...)
	}

	t.Run("until empty without a redrive policy: one warning that a failing message comes back forever", func(t *testing.T) {
		t.Parallel()
		const warning = "the queue has no redrive policy"
		r := lambdakit(t, env, "run", "-queue", queue(t, "a", "b"), "-until-empty", "-timeout", "1s", "-concurrency", "2", fn)
		if r.code != 0 || strings.Count(r.stderr, warning) != 1 || !strings.Contains(r.stderr, "comes back after every visibility timeout, forever") {
			t.Errorf("exit status %d; want 0 and the warning once\nstderr:\n%s", r.code, r.stderr)
		}
		dlq := queue(t)
		attrs, err := client.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		redriven := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1",
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"3"}`, attrs.Attributes["QueueArn"])})
		r = lambdakit(t, env, "run", "-queue", redriven, "-until-empty", "-timeout", "1s", fn)
		if r.code != 0 || strings.Contains(r.stderr, warning) {
			t.Errorf("with a redrive policy: exit status %d; want 0 and no warning\nstderr:\n%s", r.code, r.stderr)
		}
	})

	t.Run("until empty, a record the function delayed: the run says it waits, and counts it", func(t *testing.T) {
		t.Parallel()
		dlq := queue(t)
		attrs, err := client.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1",
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"5"}`, attrs.Attributes["QueueArn"])})
		if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("a fail@1 delay=6@1")}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-timeout", "1s", "-report-batch-item-failures", fn)
		took := time.Since(start)
		delayed := regexp.MustCompile(`(?m)^\s+delayed\s+1\s`)
		if r.code != 0 || !strings.Contains(r.stderr, "waiting out a delay: 1 messages hidden") || !delayed.MatchString(r.stderr) || took < 6*time.Second {
			t.Errorf("exit status %d after %v; want 0, the wait said, 1 delayed, at least 6 s\nstderr:\n%s", r.code, took, r.stderr)
		}
	})

	t.Run("until empty, a named record comes back", func(t *testing.T) {
		t.Parallel()
		url := queue(t, "a", "b fail@1", "c")
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-timeout", "1s", "-report-batch-item-failures", "-log-format", "text", fn)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
		}
		// SQS may hand the three messages to more than one receive, as
		// moto does under load: count over the batches.
		outs := jsonLines[runOutput](t, r.stdout)
		var named []string
		deleted := map[string]int{}
		for _, o := range outs {
			named = append(named, o.ItemFailures...)
			for _, id := range o.Deleted {
				deleted[id]++
			}
		}
		if len(named) != 1 || len(deleted) != 3 || deleted[named[0]] != 1 || len(outs) < 2 {
			t.Errorf("stdout:\n%s\nwant one record named in batchItemFailures, then deleted on its next delivery, and each of the 3 deleted once", r.stdout)
		}
		// On a loaded machine a message can outlive its 1s visibility
		// timeout before its delete and come back, at least once as SQS
		// promises: the summary counts what the batches did (4 and 3
		// when nothing came back early).
		deletes := 0
		for _, n := range deleted {
			deletes += n
		}
		for _, want := range []string{
			"left for redelivery (1 named in batchItemFailures)",
			"lambdakit run: stopped: the queue is empty",
			fmt.Sprintf("%-26s%d", "records", deletes+len(named)), fmt.Sprintf("%-26s%d", "deleted", deletes),
			"left for redelivery       1", "function errors           0", "batchItemFailures         1",
			"REPORT RequestId: " + outs[0].RequestID,
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("the template's SQS event gives its FilterCriteria", func(t *testing.T) {
		t.Parallel()
		tpl := writeFile(t, t.TempDir(), "template.yaml", queueTemplate+`            FilterCriteria:
              Filters:
                - Pattern: '{"body": ["a"]}'
`)
		url := queue(t, "a", "b")
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-template", tpl, fn)
		if r.code != 0 || !strings.Contains(r.stderr, "the template's event FromQ: 1 filter") {
			t.Fatalf("exit status %d; want 0 and the template's filter\nstderr:\n%s", r.code, r.stderr)
		}
		invoked := 0
		for _, o := range jsonLines[runOutput](t, r.stdout) {
			invoked += o.Records
		}
		if invoked != 1 {
			t.Errorf("stdout:\n%s\nwant the function invoked with a alone: b matches no pattern", r.stdout)
		}
	})

	t.Run("the template's SQS event gives the batch size and response types", func(t *testing.T) {
		t.Parallel()
		tpl := writeFile(t, t.TempDir(), "template.yaml", queueTemplate+`            BatchSize: 2
`)
		url := queue(t, "a", "b fail@1", "c")
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-template", tpl, fn)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
		}
		// Without ReportBatchItemFailures in the template, the record the
		// function names failed is deleted with its batch.
		// A 1 s visibility timeout under load may hand a message out twice,
		// as SQS may: count each message once.
		outs := jsonLines[runOutput](t, r.stdout)
		deleted := map[string]bool{}
		for _, o := range outs {
			if o.Records > 2 || len(o.Left) > 0 {
				t.Errorf("batch %+v; want at most 2 records, none left", o)
			}
			for _, id := range o.Deleted {
				deleted[id] = true
			}
		}
		if len(outs) < 2 || len(deleted) != 3 {
			t.Errorf("stdout:\n%s\nwant batches of 2 at most, every record deleted", r.stdout)
		}
	})

	t.Run("a failed invocation makes status 1", func(t *testing.T) {
		t.Parallel()
		url := queue(t, "a", "b error@1")
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-timeout", "1s", fn)
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\nstderr:\n%s", r.code, r.stderr)
		}
		// SQS may hand the two messages to one receive or to two, first
		// time and after the retry (moto splits them under load): one
		// batch fails as a whole, every other one succeeds, and each
		// message is deleted in the end.
		outs := jsonLines[runOutput](t, r.stdout)
		deleted := map[string]bool{}
		failed := 0
		for _, o := range outs {
			if o.Outcome == "function error" {
				failed++
				if len(o.Left) != o.Records || len(o.Deleted) != 0 || !strings.Contains(o.Reason, "esmfn: error asked by") {
					t.Errorf("failed batch %+v; want all its records left, for the function's error", o)
				}
				continue
			}
			if o.Outcome != "success" || len(o.Left) != 0 {
				t.Errorf("batch %+v; want success", o)
			}
			for _, id := range o.Deleted {
				deleted[id] = true
			}
		}
		if failed != 1 || len(deleted) != 2 {
			t.Errorf("stdout:\n%s\nwant one batch left whole on a function error, and both messages deleted in the end", r.stdout)
		}
		if !strings.Contains(r.stderr, "function errors           1") {
			t.Errorf("stderr:\n%s\nwant 1 function error in the summary", r.stderr)
		}
	})

	t.Run("without ReportBatchItemFailures, named records are deleted, and a warning says so once", func(t *testing.T) {
		t.Parallel()
		// No record comes back, so a long visibility timeout costs no
		// wait, and a batch that starts slowly (a loaded machine) cannot
		// see its message delivered twice, which SQS may do past 1 s.
		url := queueWith(t, client, 30, "a fail@1", "b fail@1", "c")
		r := lambdakit(t, env, "run", "-queue", url, "-until-empty", "-timeout", "1s", "-batch-size", "1", fn)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
		}
		for _, want := range []string{"records                   3", "deleted                   3", "batchItemFailures         0"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr:\n%s\nwant %q: each record delivered once and deleted, as Lambda deletes them", r.stderr, want)
			}
		}
		const warning = "lambdakit run: warning: the function named 1 record in batchItemFailures, but the mapping does not report batch item failures"
		if n := strings.Count(r.stderr, warning); n != 1 {
			t.Errorf("stderr:\n%s\nwant %q once, got it %d times", r.stderr, warning, n)
		}
	})

	t.Run("a visibility timeout shorter than the function's timeout is refused", func(t *testing.T) {
		t.Parallel()
		tpl := writeFile(t, t.TempDir(), "template.yaml", "Resources:\n  Fn:\n    Type: AWS::Serverless::Function\n    Properties:\n      Timeout: 7\n")
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"-timeout", "5s"}, 2, "lambdakit run: -timeout 5s: the queue's VisibilityTimeout (1s) is shorter, and Lambda refuses such an event source mapping"},
			{[]string{"-template", tpl}, 2, "lambdakit run: -timeout 7s: the queue's VisibilityTimeout (1s) is shorter"},
			{[]string{"-timeout", "5s", "-allow-short-visibility-timeout"}, 0, "lambdakit run: warning: the queue's VisibilityTimeout (1s) is shorter than the function's timeout (5s)"},
			{[]string{"-timeout", "1s"}, 0, "lambdakit run: warning: the queue's VisibilityTimeout (1s) is less than six times the function's timeout (1s)"},
		} {
			url := queue(t, "a")
			r := lambdakit(t, env, append(append([]string{"run", "-queue", url, "-until-empty"}, c.args...), fn)...)
			if r.code != c.code || strings.Count(r.stderr, c.want) != 1 {
				t.Errorf("%v: exit status %d, stderr:\n%s\nwant %d and, once, %q", c.args, r.code, r.stderr, c.code, c.want)
			}
		}
	})

	t.Run("a missing queue makes status 3", func(t *testing.T) {
		t.Parallel()
		r := lambdakit(t, env, "run", "-queue", srv.URL+"/123456789012/no-such-queue", fn)
		if r.code != 3 || !strings.Contains(r.stderr, "no-such-queue") {
			t.Errorf("exit status %d, stderr:\n%s\nwant 3 and the queue named", r.code, r.stderr)
		}
	})

	t.Run("SIGINT stops after the batch in flight", func(t *testing.T) {
		t.Parallel()
		// Two batch slots, each busy for 1.5 s: the third message is
		// never taken once the signal stops the pollers.
		url := queueWith(t, client, 10, "s1 sleep=1500", "s2 sleep=1500", "s3 sleep=1500")
		cli, _ := binaries(t)
		log := filepath.Join(t.TempDir(), "esmfn.log")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, "run", "-queue", url, "-batch-size", "1", "-concurrency", "2", "-timeout", "3s", fn)
		cmd.Env = append(append(os.Environ(), env...), "ESMFN_LOG="+log)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first invocation to start, then interrupt.
		deadline := time.Now().Add(20 * time.Second)
		for {
			if b, _ := os.ReadFile(log); bytes.Contains(b, []byte(`"kind":"start"`)) {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("the function never started; stderr:\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Fatal(err)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", code, stderr.String())
		}
		outs := jsonLines[runOutput](t, stdout.String())
		if len(outs) < 1 || len(outs) > 2 {
			t.Errorf("stdout:\n%s\nwant the one or two batches in flight, and no other", stdout.String())
		}
		for _, o := range outs {
			if o.Outcome != "success" || len(o.Deleted) != 1 {
				t.Errorf("batch %+v; want it finished and deleted", o)
			}
		}
		for _, want := range []string{"stopping after the batches in flight", "stopped on a signal", fmt.Sprintf("invocations               %d", len(outs))} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
			}
		}
	})
}

// queueWith makes a standard queue whose VisibilityTimeout is visibility
// seconds, and sends it bodies.
func queueWith(t *testing.T, client *sqs.Client, visibility int, bodies ...string) string {
	t.Helper()
	url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)})
	for _, b := range bodies {
		if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	return url
}

// queueTemplate is a template of a function Fn with a timeout of 1 s on
// a queue Q, its event FromQ's properties left open: a test appends its
// own.
const queueTemplate = `Resources:
  Q:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 1
      Events:
        FromQ:
          Type: SQS
          Properties:
            Queue: !GetAtt Q.Arn
`

// esmfnLine is a line of esmfn's log (ESMFN_LOG): an invocation's start
// or end, in the process PID.
type esmfnLine struct {
	Kind           string `json:"kind"`
	PID            int    `json:"pid"`
	MaxConcurrency string `json:"maxConcurrency"`
	RequestID      string `json:"requestId"`
	Time           int64  `json:"time"`
	Event          struct {
		Records []struct {
			MessageID string `json:"messageId"`
			Body      string `json:"body"`
		} `json:"Records"`
	} `json:"event"`
}

// perProcessRun is a run of esmfn by 'run -per-process-concurrency 3' on
// a queue of bodies, a batch of one message each, and what it left.
type perProcessRun struct {
	cliResult
	outs []runOutput
	log  []esmfnLine
	// ids are the message IDs by the label of their body ("a" for
	// "a sleep=100"); labels by the message ID.
	ids, labels map[string]string
}

func runPerProcess(t *testing.T, client *sqs.Client, env []string, fn string, visibility int, args []string, bodies ...string) perProcessRun {
	t.Helper()
	url := queueWith(t, client, visibility, bodies...)
	log := filepath.Join(t.TempDir(), "esmfn.log")
	args = append([]string{"run", "-queue", url, "-until-empty", "-batch-size", "1", "-concurrency", "3", "-per-process-concurrency", "3", "-report-batch-item-failures"}, args...)
	r := perProcessRun{cliResult: lambdakit(t, slices.Concat(env, []string{"ESMFN_LOG=" + log}), append(args, fn)...), ids: map[string]string{}, labels: map[string]string{}}
	r.outs = jsonLines[runOutput](t, r.stdout)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, r.stderr)
	}
	r.log = jsonLines[esmfnLine](t, string(b))
	for _, l := range r.log {
		for _, rec := range l.Event.Records {
			label, _, _ := strings.Cut(rec.Body, " ")
			r.ids[label], r.labels[rec.MessageID] = rec.MessageID, label
		}
	}
	return r
}

// ended counts, by message label, the invocations of one message that
// answered; deleted, the times run deleted each message.
func (r perProcessRun) ended() (ended, deleted map[string]int) {
	ended, deleted = map[string]int{}, map[string]int{}
	started := map[string]string{} // request ID → label
	for _, l := range r.log {
		if l.Kind == "start" && len(l.Event.Records) == 1 {
			started[l.RequestID] = r.labels[l.Event.Records[0].MessageID]
		}
	}
	for _, l := range r.log {
		if l.Kind == "end" {
			ended[started[l.RequestID]]++
		}
	}
	for _, o := range r.outs {
		for _, id := range o.Deleted {
			deleted[r.labels[id]]++
		}
	}
	return ended, deleted
}

// mostAtOnce is the most invocations process pid was running at once.
func (r perProcessRun) mostAtOnce(pid int) int {
	most, now := 0, 0
	for _, l := range r.log { // in the order written: start and end of each are in order
		if l.PID != pid {
			continue
		}
		if l.Kind == "start" {
			now++
		} else {
			now--
		}
		most = max(most, now)
	}
	return most
}

// -per-process-concurrency N runs up to N batches at once in one process,
// as Lambda Managed Instances does, and a crash or timeout of that process
// ends every invocation it was running: their batches are left whole, to
// come back after the visibility timeout, and are handled then.
func TestRunPerProcessConcurrency(t *testing.T) {
	srv := moto.Server(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	client := sqs.NewFromConfig(moto.Config(t))
	env := awsEnv("SQS", srv.URL)

	t.Run("every message handled once, several at once in one process", func(t *testing.T) {
		t.Parallel()
		bodies := []string{"a sleep=400", "b sleep=400", "c sleep=400", "d sleep=400", "e sleep=400", "f sleep=400"}
		r := runPerProcess(t, client, env, fn, 3, []string{"-timeout", "2s"}, bodies...)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
		}
		ended, deleted := r.ended()
		for _, b := range bodies {
			label, _, _ := strings.Cut(b, " ")
			if ended[label] != 1 || deleted[label] != 1 {
				t.Errorf("message %s: answered %d times, deleted %d times; want once each\nstdout:\n%s", label, ended[label], deleted[label], r.stdout)
			}
		}
		pids := map[int]bool{}
		for _, l := range r.log {
			pids[l.PID] = true
			if l.MaxConcurrency != "3" {
				t.Errorf("log line %+v: AWS_LAMBDA_MAX_CONCURRENCY %q; want 3", l, l.MaxConcurrency)
			}
		}
		if len(pids) != 1 || r.mostAtOnce(r.log[0].PID) < 2 {
			t.Errorf("%d processes, at most %d invocations at once; want one process running more than one\nlog: %+v", len(pids), r.mostAtOnce(r.log[0].PID), r.log)
		}
		for _, want := range []string{"lambdakit run: stopped: the queue is empty",
			"invocations               6", "records                   6", "deleted                   6",
			"left for redelivery       0", "function errors           0"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
			}
		}
		if n := strings.Count(r.stderr, "Init Duration"); n != 1 {
			t.Errorf("%d Init Durations; want 1 (one process)\n%s", n, r.stderr)
		}
	})

	// failedTogether checks a run of a, b and c in which the first process
	// ended while running the three: each of its invocations is reported
	// with one of outcomes, its message left; then each message comes back,
	// is answered once in a new process and deleted once.
	failedTogether := func(t *testing.T, r perProcessRun, outcomes ...string) {
		t.Helper()
		if r.code != 1 {
			t.Errorf("exit status %d; want 1 (an invocation failed)\nstderr:\n%s", r.code, r.stderr)
		}
		first := r.log[0].PID
		var ran []string // request IDs
		for _, l := range r.log {
			if l.PID == first && l.Kind == "start" {
				ran = append(ran, l.RequestID)
			}
		}
		if r.mostAtOnce(first) != 3 {
			t.Fatalf("the first process ran at most %d invocations at once; want a, b and c at once\nlog: %+v\nstderr:\n%s", r.mostAtOnce(first), r.log, r.stderr)
		}
		byRequest := map[string]runOutput{}
		for _, o := range r.outs {
			byRequest[o.RequestID] = o
		}
		for _, id := range ran {
			o := byRequest[id]
			if !slices.Contains(outcomes, o.Outcome) || len(o.Deleted) != 0 || len(o.Left) != 1 {
				t.Errorf("invocation %s of the process that ended: %+v; want outcome in %v, its message left", id, o, outcomes)
			}
		}
		ended, deleted := r.ended()
		for _, label := range []string{"a", "b", "c"} {
			if ended[label] != 1 || deleted[label] != 1 {
				t.Errorf("message %s: answered %d times, deleted %d times; want once each, on its redelivery\nstdout:\n%s", label, ended[label], deleted[label], r.stdout)
			}
		}
		for _, l := range r.log {
			if l.PID == first && l.Kind == "end" {
				t.Errorf("the process that ended answered %+v; want none of its invocations answered", l)
			}
		}
		for _, want := range []string{"lambdakit run: stopped: the queue is empty",
			"invocations               6", "records                   6", "deleted                   3",
			"left for redelivery       3", "function errors           3"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
			}
		}
	}

	t.Run("a crash leaves every batch its process was running, handled on redelivery", func(t *testing.T) {
		t.Parallel()
		// c crashes the process while a and b sleep in it. The visibility
		// timeout, shorter than the function's, brings them back soon.
		r := runPerProcess(t, client, env, fn, 1, []string{"-timeout", "2s", "-allow-short-visibility-timeout"},
			"a sleep=1800@1", "b sleep=1800@1", "c sleep=800@1 crash@1")
		failedTogether(t, r, "crash")
	})

	t.Run("a timeout leaves every batch its process was running, handled on redelivery", func(t *testing.T) {
		t.Parallel()
		// The first invocation to reach its deadline times out, and the
		// others, their process killed, end as crashes (or time out too).
		r := runPerProcess(t, client, env, fn, 1, []string{"-timeout", "1s"},
			"a sleep=3000@1", "b sleep=3000@1", "c sleep=3000@1")
		failedTogether(t, r, "timeout", "crash")
		if !strings.Contains(r.stdout, `"outcome":"timeout"`) {
			t.Errorf("stdout:\n%s\nwant a timeout", r.stdout)
		}
	})
}
