package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The CLI sends traffic only where the user pointed it: a queue
// URL names its host, and an endpoint variable that disagrees is refused,
// not followed. Every run here is offline (see offline): whatever the CLI
// decides, no request leaves loopback.

// TestQueueURLNamesTheEndpoint runs run, publish and redrive with no
// endpoint variable at all, against a moto_server that only their queue
// URLs name.
func TestQueueURLNamesTheEndpoint(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	client := sqs.NewFromConfig(moto.Config(t))
	fn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	env := noEndpoints()

	q := newPublishQueue(t, client, false, nil)
	r := cli(t, env, `{"payment_id":"pay_1"}`+"\n", "publish", "-queue", q.url)
	if r.code != 0 || q.count(t) != 1 {
		t.Fatalf("publish: exit status %d; want 0 and the line on %s\n%s", r.code, srv.URL, r.stderr)
	}
	r = cli(t, env, "", "run", "-queue", q.url, "-until-empty", "-timeout", "5s", fn)
	if outs := jsonLines[runOutput](t, r.stdout); r.code != 0 || len(outs) != 1 || len(outs[0].Deleted) != 1 {
		t.Fatalf("run: exit status %d, stdout:\n%s\nwant 0 and the message deleted\n%s", r.code, r.stdout, r.stderr)
	}
	dlq, target := newPublishQueue(t, client, false, nil), newPublishQueue(t, client, false, nil)
	dlq.sendAll(t, []dlqMessage{{body: "x"}})
	r = cli(t, env, "", "redrive", "-from", dlq.url, "-to", target.url)
	if r.code != 0 || target.count(t) != 1 {
		t.Fatalf("redrive: exit status %d; want 0 and the message moved\n%s", r.code, r.stderr)
	}
}

// TestEndpointDisagreementIsRefused checks that every command that takes a
// queue URL refuses, as a usage error (exit status 2), before any request,
// when the URL and the configured endpoint disagree.
func TestEndpointDisagreementIsRefused(t *testing.T) {
	srv := moto.Server(t)
	client := sqs.NewFromConfig(moto.Config(t))
	_, echo := binaries(t)
	q := newPublishQueue(t, client, false, nil)
	dlq := newPublishQueue(t, client, false, nil)
	dlq.sendAll(t, []dlqMessage{{body: "x"}})
	name := q.url[strings.LastIndex(q.url, "/")+1:]
	// The same queue name on a server nothing listens on, and on AWS: with
	// the old rule (the endpoint variable wins), both went to moto_server,
	// which has a queue of that name.
	elsewhere := at(deadEndpoint, q.url)
	onAWS := "https://sqs.us-east-1.amazonaws.com/123456789012/" + name

	for _, c := range []struct {
		name  string
		env   []string
		queue string
		want  string
	}{
		{"the variable names another server than the URL", noEndpoints("AWS_ENDPOINT_URL_SQS=" + deadEndpoint), q.url,
			fmt.Sprintf("the queue URL %s is on %s, but the SQS endpoint is %s (AWS_ENDPOINT_URL_SQS): unset AWS_ENDPOINT_URL_SQS, or make the two agree", q.url, srv.URL, deadEndpoint)},
		{"the URL names another server than the variable", noEndpoints("AWS_ENDPOINT_URL=" + srv.URL), elsewhere,
			fmt.Sprintf("the queue URL %s is on %s, but the SQS endpoint is %s (AWS_ENDPOINT_URL)", elsewhere, deadEndpoint, srv.URL)},
		{"an AWS URL with a local endpoint", noEndpoints("AWS_ENDPOINT_URL=" + srv.URL), onAWS,
			fmt.Sprintf("the queue URL %s is on AWS, but the SQS endpoint is %s (AWS_ENDPOINT_URL): unset AWS_ENDPOINT_URL, or give the URL of a queue on that endpoint", onAWS, srv.URL)},
		{"an AWS host that is not SQS's", noEndpoints(), "https://dynamodb.us-east-1.amazonaws.com/123456789012/" + name, "names an AWS host that is not SQS's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"run", "-queue", c.queue, echo},
				{"publish", "-queue", c.queue},
				{"redrive", "-from", c.queue, "-to", c.queue + "-other"},
			} {
				r := cli(t, c.env, `{"payment_id":"pay_1"}`+"\n", args...)
				if r.code != 2 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "Run 'lambdakit "+args[0]+" -h'") {
					t.Errorf("%s: exit status %d, stderr:\n%s\nwant 2 and %q in the usage error's form", args[0], r.code, r.stderr, c.want)
				}
			}
			if n := q.count(t); n != 0 {
				t.Errorf("the queue on moto_server holds %d messages; want none", n)
			}
		})
	}

	t.Run("redrive: queues on two endpoints", func(t *testing.T) {
		r := cli(t, noEndpoints(), "", "redrive", "-from", dlq.url, "-to", onAWS)
		if want := "are on different endpoints (" + srv.URL + ", AWS SQS in us-east-1)"; r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, want)
		}
	})

	t.Run("run: a region that is not the AWS queue's", func(t *testing.T) {
		queue := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
		envFile := writeFile(t, t.TempDir(), "env.json", `{"Fn": {"AWS_REGION": "eu-central-1"}}`)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"-region", "us-west-2"}, "-region is us-west-2, but the queue URL " + queue + " is in eu-west-1"},
			{[]string{"-env-file", envFile}, "AWS_REGION in the env file is eu-central-1, but the queue URL " + queue + " is in eu-west-1"},
		} {
			r := cli(t, noEndpoints(), "", append(append([]string{"run", "-live"}, c.args...), "-queue", queue, echo)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("run %v: exit status %d, stderr:\n%s\nwant 2 and %q", c.args, r.code, r.stderr, c.want)
			}
		}
	})

	if n := dlq.count(t); n != 1 {
		t.Errorf("the DLQ on moto_server holds %d messages; want its 1, untouched", n)
	}
}

// records takes a table name, which names no endpoint: it says where its
// calls go before the first one.
func TestRecordsSaysWhereItGoes(t *testing.T) {
	srv := moto.Server(t)
	args := []string{"records", "get", "-table", "no-such-table", "-prefix", "payment", "pay_1"}

	r := cli(t, awsEnv("DYNAMODB", srv.URL), "", args...)
	if want := "lambdakit records: table no-such-table at " + srv.URL + " (AWS_ENDPOINT_URL_DYNAMODB)\n"; r.code != 3 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit status %d, stderr:\n%s\nwant 3, and first %q", r.code, r.stderr, want)
	}

	// Without an endpoint the call goes to AWS (with -live), which offline
	// turns into a refused connection to the dead proxy on loopback.
	r = cli(t, noEndpoints("AWS_MAX_ATTEMPTS=1"), "", append([]string{"records", "get", "-live"}, args[2:]...)...)
	if want := "lambdakit records: table no-such-table on AWS DynamoDB in us-east-1 (no AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set)\n"; r.code != 3 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit status %d, stderr:\n%s\nwant 3, and first %q", r.code, r.stderr, want)
	}
	if !strings.Contains(r.stderr, deadEndpoint[len("http://"):]) {
		t.Errorf("stderr:\n%s\nwant the call refused at the dead proxy %s", r.stderr, deadEndpoint)
	}
}

// The function's endpoints come from the env file when it sets any: a
// service's endpoint variable left in the shell would win over the file's
// AWS_ENDPOINT_URL in the SDK, and send the function's calls elsewhere.
func TestFunctionEndpointsFromTheEnvFile(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	ev := writeFile(t, dir, "event.json", `{"env": ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"]}`)
	shell := []string{"AWS_ENDPOINT_URL=http://127.0.0.1:5998", "AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:5999", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=false"}
	for _, c := range []struct {
		name, file string
		want       map[string]any
	}{
		{"the env file sets AWS_ENDPOINT_URL: the shell's endpoints are left out", `{"Fn": {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}}`,
			map[string]any{"AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_ENDPOINT_URL_DYNAMODB": nil, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": nil}},
		{"the env file sets none: the shell's are passed", `{"Fn": {"ECHO_VAR": "x"}}`,
			map[string]any{"AWS_ENDPOINT_URL": "http://127.0.0.1:5998", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:5999", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			envFile := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "_")+".json", c.file)
			r := lambdakit(t, shell, "invoke", "-env-file", envFile, echo, ev)
			outs := outputs(t, r.stdout)
			var resp struct {
				Env map[string]any `json:"env"`
			}
			if r.code != 0 || len(outs) != 1 || json.Unmarshal(outs[0].Response, &resp) != nil {
				t.Fatalf("exit status %d, stdout:\n%s\nwant 0 and one response\n%s", r.code, r.stdout, r.stderr)
			}
			for k, v := range c.want {
				if resp.Env[k] != v {
					t.Errorf("the function sees %s=%v; want %v", k, resp.Env[k], v)
				}
			}
		})
	}
}

// Every command that can reach AWS follows one rule: a queue, table, stream
// or function on AWS needs -live. Without it the command refuses (exit 2)
// before any request, naming the endpoint the calls would go to; with it,
// the calls go to that very endpoint (here a recording proxy on loopback,
// which forwards nothing).
func TestEveryCommandNeedsLiveForAWS(t *testing.T) {
	_, echo := binaries(t)
	ev := writeFile(t, t.TempDir(), "event.json", `{}`)
	const queue = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
	for _, c := range []struct {
		name string
		args []string // -live comes first
		host string   // where the calls would go
	}{
		{"publish", []string{"publish", "-queue", queue}, "sqs.us-east-1.amazonaws.com"},
		{"redrive", []string{"redrive", "-from", queue + "-dlq", "-to", queue}, "sqs.us-east-1.amazonaws.com"},
		{"run a queue", []string{"run", "-queue", queue, "-until-empty", echo}, "sqs.us-east-1.amazonaws.com"},
		{"run a stream", []string{"run", "-stream", "arn:aws:kinesis:us-east-1:123456789012:stream/orders", echo}, "123456789012.control-kinesis.us-east-1.amazonaws.com"},
		{"run a DynamoDB stream", []string{"run", "-stream", "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000", echo}, "streams.dynamodb.us-east-1.amazonaws.com"},
		{"run a deployed function", []string{"run", "-function", "orders", echo}, "lambda.us-east-1.amazonaws.com"},
		{"invoke a deployed function", []string{"invoke", "-function", "orders", echo, ev}, "lambda.us-east-1.amazonaws.com"},
		{"records get", []string{"records", "get", "-table", "payments", "-prefix", "payment", "pay_1"}, "dynamodb.us-east-1.amazonaws.com"},
		{"records delete", []string{"records", "delete", "-yes", "-table", "payments", "-prefix", "payment", "pay_1"}, "dynamodb.us-east-1.amazonaws.com"},
		{"records stuck", []string{"records", "stuck", "-table", "payments", "-prefix", "payment"}, "dynamodb.us-east-1.amazonaws.com"},
		{"records failed", []string{"records", "failed", "-table", "payments", "-prefix", "payment"}, "dynamodb.us-east-1.amazonaws.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := newConnectRecorder(t)
			env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_REGION=us-east-1", "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
			r := cli(t, env, "", c.args...)
			want := "is on AWS: its calls would go to https://" + c.host
			if r.code != 2 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Give -live") || len(rec.Hosts()) != 0 {
				t.Errorf("without -live: exit status %d, calls to %v; want 2, no call, and %q\nstderr:\n%s", r.code, rec.Hosts(), want, r.stderr)
			}
			live := append([]string{c.args[0], "-live"}, c.args[1:]...)
			if c.args[0] == "records" {
				live = append([]string{"records", c.args[1], "-live"}, c.args[2:]...)
			}
			r = cli(t, env, "", live...)
			if hosts := rec.Hosts(); r.code == 2 || len(hosts) == 0 || hosts[0] != c.host+":443" {
				t.Errorf("with -live: exit status %d, calls to %v; want the calls at %s:443 (failing there, offline)\nstderr:\n%s", r.code, hosts, c.host, r.stderr)
			}
		})
	}
}
