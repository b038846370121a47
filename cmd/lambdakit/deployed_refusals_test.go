package main_test

// Refusals of run and invoke with a deployed function, found by attacking
// d81b1d9: each test failed on it.

import (
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// remoteHosts are the hosts a run asked the recording proxy for: every
// host that is not loopback (the SDK never proxies loopback).
func remoteHosts(rec *connectRecorder) []string {
	var out []string
	for _, h := range rec.Hosts() {
		host, _, err := net.SplitHostPort(h)
		if err != nil {
			host = h
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			continue
		}
		out = append(out, h)
	}
	return out
}

// mappedFunction creates a function on moto with a (disabled) SQS mapping and
// returns its name and its queue's name.
func mappedFunction(t *testing.T) (name, queueName string) {
	t.Helper()
	name, queueURL := mappedFunctionWith(t, "30", nil)
	return name, queueURL[strings.LastIndex(queueURL, "/")+1:]
}

// mappedFunctionWith creates a function on moto (of the default timeout,
// 3 s), a queue of the given VisibilityTimeout, and a disabled SQS mapping
// between them that mapping, if not nil, completes; it returns the
// function's name and the queue's URL.
func mappedFunctionWith(t *testing.T, visibility string, mapping func(*lambda.CreateEventSourceMappingInput)) (name, queueURL string) {
	t.Helper()
	cfg := moto.Config(t)
	ctx := t.Context()
	sqsc := sqs.NewFromConfig(cfg)
	fn := testenv.Function(t, cfg, lambda.CreateFunctionInput{})
	queueURL = testenv.Queue(t, sqsc, false, map[string]string{"VisibilityTimeout": visibility})
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	in := &lambda.CreateEventSourceMappingInput{
		FunctionName: fn.FunctionArn, EventSourceArn: aws.String(attrs.Attributes["QueueArn"]), Enabled: aws.Bool(false),
	}
	if mapping != nil {
		mapping(in)
	}
	if _, err := lambda.NewFromConfig(cfg).CreateEventSourceMapping(ctx, in); err != nil {
		t.Fatal(err)
	}
	return aws.ToString(fn.FunctionName), queueURL
}

// A queue behind an interface VPC endpoint of SQS is a live AWS queue like
// any other: run must refuse it without -live, before any call.
func TestRunVPCEndpointQueueNeedsLive(t *testing.T) {
	_, echo := binaries(t)
	queue := "https://vpce-0a1b2c3d4e5f-abcd1234.sqs.us-east-1.vpce.amazonaws.com/123456789012/orders"
	rec := newConnectRecorder(t)
	env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_REGION=us-east-1", "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
	r := cli(t, env, "", "run", "-queue", queue, "-until-empty", echo)
	if r.code != 2 || len(rec.Hosts()) != 0 {
		t.Errorf("run without -live on a VPC endpoint's queue: exit status %d, calls to %v; want 2 (needs -live) and no call\nstderr:\n%s",
			r.code, rec.Hosts(), r.stderr)
	}
}

// A command line that is wrong on its face is a usage error (exit 2)
// before any call, even with -function and -live, where the Lambda call
// (here to AWS: no endpoint is set) would fail (exit 3) and hide the usage
// error.
func TestUsageErrorsBeforeTheLambdaCall(t *testing.T) {
	_, echo := binaries(t)
	ev := writeFile(t, t.TempDir(), "event.json", `{}`)
	for _, args := range [][]string{
		{"invoke", "-live", "-function", "orders", "-log-format", "xml", echo, ev},
		{"invoke", "-live", "-function", "orders", "-timeout", "-1s", echo, ev},
		{"run", "-live", "-function", "orders", "-memory", "-5", echo},
		{"run", "-live", "-function", "orders", "-batch-size", "0", echo},
		// The live refusal, knowable from -queue alone.
		{"run", "-function", "orders", "-queue", "https://sqs.us-east-1.amazonaws.com/123456789012/orders", echo},
	} {
		rec := newConnectRecorder(t)
		env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_REGION=us-east-1", "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
		r := cli(t, env, "", args...)
		if r.code != 2 || len(rec.Hosts()) != 0 {
			t.Errorf("%v: exit status %d, calls to %v; want 2 and no call\nstderr:\n%s", args, r.code, rec.Hosts(), r.stderr)
		}
	}
}

// With the Lambda endpoint on moto (AWS_ENDPOINT_URL_LAMBDA) and no SQS
// endpoint, the mapping read from moto has its queue looked up on AWS's
// SQS, with the shell's credentials, and stderr names only the Lambda
// endpoint: a call where the user did not point, unannounced.
func TestRunQueueLookupStaysWhereTheFunctionWasRead(t *testing.T) {
	srv := moto.Server(t)
	_, echo := binaries(t)
	name, _ := mappedFunction(t)
	rec := newConnectRecorder(t)
	env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_ENDPOINT_URL_LAMBDA="+srv.URL, "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
	r := cli(t, env, "", "run", "-function", name, "-until-empty", echo)
	if hosts := remoteHosts(rec); len(hosts) != 0 {
		t.Errorf("exit status %d; calls sent to %v, though the function was read from %s and no SQS endpoint was given\nstderr:\n%s",
			r.code, hosts, srv.URL, r.stderr)
	}
}

// The mapping -queue chooses is matched by the queue's name only: a queue
// on AWS in another region (or account) than the mapping's gets the
// mapping's settings, and runs as a function in the queue's region, though
// the deployed function is in another; run's usage says Lambda maps a
// queue only to a function in its region. It should be a usage error
// before any SQS call.
func TestRunQueueOfAnotherRegionOrAccountIsNotTheMappings(t *testing.T) {
	srv := moto.Server(t)
	_, echo := binaries(t)
	name, qname := mappedFunction(t)
	for _, queue := range []string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/" + qname,
		"https://sqs.us-east-1.amazonaws.com/999999999999/" + qname,
	} {
		rec := newConnectRecorder(t)
		env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_ENDPOINT_URL_LAMBDA="+srv.URL, "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
		r := cli(t, env, "", "run", "-live", "-function", name, "-queue", queue, "-until-empty", echo)
		if r.code != 2 || len(remoteHosts(rec)) != 0 {
			t.Errorf("-queue %s for a mapping of 123456789012/%s in us-east-1: exit status %d, calls to %v; want 2 (not the mapping's queue) and no SQS call\nstderr:\n%s",
				queue, qname, r.code, remoteHosts(rec), r.stderr)
		}
	}
}

// invoke -function exits 3 when the function cannot be read (the existing
// TestDeployedFunction asserts it), but invoke's exit-status text gives 3
// only to a bootstrap that cannot start or a failed Runtime API.
func TestInvokeExitStatusTextCoversAMissingFunction(t *testing.T) {
	srv := moto.Server(t)
	_, echo := binaries(t)
	ev := writeFile(t, t.TempDir(), "event.json", `{}`)
	env := noEndpoints("AWS_ENDPOINT_URL=" + srv.URL)
	r := cli(t, env, "", "invoke", "-function", "review-no-such-function", echo, ev)
	help := cli(t, env, "", "invoke", "-h")
	text := help.stdout + help.stderr
	i := strings.Index(text, "Exit status:")
	if r.code != 3 || i < 0 {
		t.Fatalf("exit status %d, help:\n%s", r.code, text)
	}
	status := text[i:]
	line3 := status[strings.Index(status, "\n  3 "):]
	line3 = line3[:strings.Index(line3, "\n  130")]
	if !strings.Contains(line3, "function") || !(strings.Contains(line3, "deployed") || strings.Contains(line3, "Lambda")) {
		t.Errorf("a missing deployed function exits %d, but the usage text's status 3 says only:%s", r.code, line3)
	}
}
