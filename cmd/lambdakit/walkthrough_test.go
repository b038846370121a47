package main_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// TestDocsThroughAQueueByHand replays docs/local-tooling.md's
// "Through a queue, by hand" as written: demo local, the two FIFO queues,
// lambdakit publish of events/payments-queue.jsonl, then
//
//	bin/lambdakit run -env-file bin/local-env.json -timeout 5s -report-batch-item-failures -until-empty -queue $Q bin/bootstrap
//
// of which the page says: "run deletes the four valid payments and stops
// once the poison message pay_6099 has failed twice and SQS has moved it to
// the DLQ. Its exit status is 1, because the batch that held only pay_6099
// failed as a whole."
func TestDocsThroughAQueueByHand(t *testing.T) {
	t.Parallel()   // its own names, processes and servers: it waits mostly
	moto.Server(t) // skips without moto_server
	cli, _ := binaries(t)
	demoBin := testenv.Build(t, "../../functions/payment/demo")
	bootstrap := testenv.Build(t, "../../functions/payment")
	dir := t.TempDir()
	envFile := filepath.Join(dir, "local-env.json")

	// go run ./functions/payment/demo local -env-file local-env.json, on
	// free ports.
	var stderr logline.Buffer
	local := exec.Command(demoBin, "local", "-moto-port", "0", "-gateway-port", "0", "-template", "../../template.yaml", "-env-file", envFile)
	local.Stderr = &stderr
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { local.Wait(); close(exited) }()
	t.Cleanup(func() {
		local.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			local.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "Ctrl-C stops everything") {
		select {
		case <-exited:
			t.Fatalf("demo local exited before it was ready:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo local not ready within 60s:\n%s", stderr.String())
		}
	}
	endpoint := regexp.MustCompile(`moto_server \(DynamoDB, SQS\) on (http://\S+),`).FindStringSubmatch(stderr.String())
	if endpoint == nil {
		t.Fatalf("demo local does not say where moto_server is:\n%s", stderr.String())
	}
	motoURL := endpoint[1]

	// export AWS_ENDPOINT_URL=... ; aws sqs create-queue ... (twice)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(motoURL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("lambdakit-payment-dlq.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}}); err != nil {
		t.Fatal(err)
	}
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("lambdakit-payment-queue.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "10",
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:lambdakit-payment-dlq.fifo","maxReceiveCount":"2"}`}})
	if err != nil {
		t.Fatal(err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	env := []string{"AWS_ENDPOINT_URL=" + motoURL, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_SESSION_TOKEN=", "AWS_PROFILE="}

	pub := lambdakit(t, env, "publish", "-queue", queueURL, "-key-field", "payment_id", "-group-field", "customer_id", "../../events/payments-queue.jsonl")
	if pub.code != 0 {
		t.Fatalf("publish: exit status %d\n%s", pub.code, pub.stderr)
	}

	r := runBounded(t, cli, env, 90*time.Second, "run", "-env-file", envFile, "-timeout", "5s", "-report-batch-item-failures", "-until-empty", "-queue", queueURL, bootstrap)

	dlq := drainBodies(t, client, strings.Replace(queueURL, "lambdakit-payment-queue.fifo", "lambdakit-payment-dlq.fifo", 1))
	inDLQ := strings.Contains(strings.Join(dlq, "\n"), "pay_6099")
	if r.code != 1 || !inDLQ {
		t.Errorf("the page's walkthrough: exit status %d, pay_6099 in the DLQ: %v (DLQ %q);\nthe page says exit status 1, pay_6099 moved to the DLQ after failing twice\nstdout:\n%s\nstderr (warnings):\n%s",
			r.code, inDLQ, dlq, r.stdout, grepLines(r.stderr, "lambdakit run"))
	}
	// The summary counts pay_6099's last delivery as gone to the DLQ, not
	// as left for redelivery.
	for _, want := range []string{"left for redelivery       1", "to the DLQ                1"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
}

// runBounded runs the CLI with env added, bounded by d.
func runBounded(t *testing.T, cli string, env []string, d time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = environ(env)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lambdakit %v did not end within %v\nstderr:\n%s", args, d, stderr.String())
	}
	var exitErr *exec.ExitError
	if err != nil && !asExit(err, &exitErr) {
		t.Fatal(err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*target = e
	return ok
}

// drainBodies receives what the queue holds and returns the bodies.
func drainBodies(t *testing.T, client *sqs.Client, url string) []string {
	t.Helper()
	var bodies []string
	for _, m := range testenv.Drain(t, client, url) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	return bodies
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The template's FunctionResponseTypes gives ReportBatchItemFailures unless
// the command line says otherwise: -report-batch-item-failures=false, set
// explicitly, wins over the template, as every flag does.
func TestResponseTypesFlagOverTemplate(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	client := sqs.NewFromConfig(moto.Config(t))
	env := awsEnv("SQS", srv.URL)
	tpl := writeFile(t, t.TempDir(), "template.yaml", queueTemplate+`            FunctionResponseTypes: [ReportBatchItemFailures]
`)
	// With the failures reported, "b" is left for redelivery once and
	// comes back; without, the batch's answer is taken whole and "b" is
	// deleted with "a". The counts of records and deletes are not
	// compared: with a 1 s visibility timeout a batch that starts slowly
	// (a loaded machine) may see "a" delivered twice, as SQS may.
	for _, c := range []struct {
		args    []string
		left    string
		warning bool
	}{
		{nil, "1", false},
		{[]string{"-report-batch-item-failures=false"}, "0", true},
		{[]string{"-report-batch-item-failures=true"}, "1", false},
	} {
		url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1"})
		for _, b := range []string{"a", "b fail@1"} {
			if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
				t.Fatal(err)
			}
		}
		r := lambdakit(t, env, append(append([]string{"run", "-queue", url, "-until-empty", "-template", tpl, "-batch-size", "2", "-concurrency", "2"}, c.args...), fn)...)
		warned := strings.Contains(r.stderr, "but the mapping does not report batch item failures")
		left := regexp.MustCompile(`left for redelivery +` + c.left + `\b`)
		if r.code != 0 || !left.MatchString(r.stderr) || warned != c.warning {
			t.Errorf("%v: exit status %d, warned %v; want 0, %s left for redelivery, warned %v\nstderr:\n%s", c.args, r.code, warned, c.left, c.warning, r.stderr)
		}
	}
}
