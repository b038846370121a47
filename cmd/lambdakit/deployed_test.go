package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// A function deployed on moto_server's Lambda gives invoke and run its
// settings and environment, and run its SQS mapping: nothing is said twice.
func TestDeployedFunction(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	cfg := moto.Config(t)
	ctx := t.Context()
	_, echo := binaries(t)
	esmfn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	sqsc := sqs.NewFromConfig(cfg)
	env := noEndpoints("AWS_ENDPOINT_URL=" + srv.URL)

	dir := t.TempDir()
	log := filepath.Join(dir, "esmfn.log")
	fn := testenv.Function(t, cfg, lambda.CreateFunctionInput{
		Timeout:     aws.Int32(2),
		MemorySize:  aws.Int32(320),
		Environment: &lambdatypes.Environment{Variables: map[string]string{"ECHO_VAR": "deployed", "ESMFN_LOG": log}},
	})
	name := aws.ToString(fn.FunctionName)
	queueURL := testenv.Queue(t, sqsc, false, map[string]string{"VisibilityTimeout": "3"})
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	lc := lambda.NewFromConfig(cfg)
	mapping, err := lc.CreateEventSourceMapping(ctx, &lambda.CreateEventSourceMappingInput{
		FunctionName: fn.FunctionArn, EventSourceArn: aws.String(attrs.Attributes["QueueArn"]), BatchSize: aws.Int32(2),
		FunctionResponseTypes: []lambdatypes.FunctionResponseType{lambdatypes.FunctionResponseTypeReportBatchItemFailures},
		ScalingConfig:         &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(2)},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("invoke", func(t *testing.T) {
		event := writeFile(t, t.TempDir(), "event.json", `{"env": ["ESMFN_LOG"]}`)
		override := writeFile(t, t.TempDir(), "env.json", `{"Parameters": {"ECHO_VAR": "from the file"}}`)
		for _, c := range []struct {
			args []string
			want string
		}{
			{nil, "deployed"},
			{[]string{"-env-file", override}, "from the file"},
		} {
			r := cli(t, env, "", append(append([]string{"invoke", "-function", name}, c.args...), echo, event)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
			}
			if want := "lambdakit invoke: function " + name + " at " + srv.URL + " (AWS_ENDPOINT_URL)\n"; !strings.HasPrefix(r.stderr, want) {
				t.Errorf("stderr:\n%s\nwant first %q", r.stderr, want)
			}
			var got struct {
				Response struct {
					Function, Region, Var, Memory string
					Deadline                      int               `json:"deadlineSeconds"`
					Env                           map[string]string `json:"env"`
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("stdout %s: %v", r.stdout, err)
			}
			g := got.Response
			if g.Function != name || g.Region != cfg.Region || g.Var != c.want || g.Memory != "320" || g.Deadline != 2 || g.Env["ESMFN_LOG"] != log {
				t.Errorf("%v: the function saw %+v; want the deployed name, region, memory 320, a 2 s deadline, ECHO_VAR %q and the deployed ESMFN_LOG", c.args, g, c.want)
			}
		}
	})

	t.Run("run", func(t *testing.T) {
		// Enabled, moto_server's own mapping receives each message as it
		// is sent (and gives it back, with no Docker to run the
		// function): run says so, and the test disables it, as its
		// warning asks.
		r := cli(t, env, "", "run", "-function", name, "-until-empty", esmfn)
		if want := "lambdakit run: warning: the deployed mapping " + aws.ToString(mapping.UUID) + " is Enabled: it consumes the queue too"; r.code != 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit status %d, stderr:\n%s\nwant 0 and %q", r.code, r.stderr, want)
		}
		if _, err := lc.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{UUID: mapping.UUID, Enabled: aws.Bool(false)}); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"a", "b fail@1", "c"} {
			if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(b)}); err != nil {
				t.Fatal(err)
			}
		}
		r = cli(t, env, "", "run", "-function", name, "-until-empty", esmfn)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "warning: the deployed mapping") {
			t.Errorf("stderr:\n%s\nwant no warning about a disabled mapping", r.stderr)
		}
		for _, want := range []string{
			"lambdakit run: function " + name + " at " + srv.URL + " (AWS_ENDPOINT_URL)\n",
			"queue " + queueURL + ", batch size 2, window 0s, ReportBatchItemFailures, maximum concurrency 2, 0 filters\n",
			"batchItemFailures         1", "deleted                   3",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr:\n%s\nwant %q", r.stderr, want)
			}
		}
		for _, o := range jsonLines[runOutput](t, r.stdout) {
			if o.Records > 2 {
				t.Errorf("a batch of %d records; want the mapping's batch size, 2, at most", o.Records)
			}
		}
		// The deployed ESMFN_LOG reached the function: it logged there.
		if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), `"kind":"start"`) {
			t.Errorf("the function's log %s: %v, %q; want its invocations, as the deployed environment asks", log, err, b)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		bare := testenv.Function(t, cfg, lambda.CreateFunctionInput{FunctionName: aws.String(name + "-bare")})
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"run", "-function", name, "-template", "template.yaml", esmfn}, 2, "-function and -template both describe the function: give one"},
			{[]string{"invoke", "-function", name + "-missing", echo, "-"}, 3, "function " + name + "-missing: "},
			{[]string{"run", "-function", aws.ToString(bare.FunctionName), esmfn}, 2, "has no SQS event source mapping"},
			{[]string{"run", "-function", name, "-queue", queueURL + "-other", esmfn}, 2, "has no SQS event source mapping for the queue"},
			{[]string{"run", "-function", aws.ToString(fn.FunctionArn), "-region", "eu-west-1", esmfn}, 2, "-region is eu-west-1, but the function " + aws.ToString(fn.FunctionArn) + " is in " + cfg.Region},
		} {
			r := cli(t, env, "{}", c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%v: exit status %d, stderr:\n%s\nwant %d and %q", c.args, r.code, r.stderr, c.code, c.want)
			}
		}
	})
}

// The FilterCriteria of a deployed mapping apply to run -function as on
// Lambda: a message no pattern matches is deleted without an invocation. A
// -filter given replaces them; a pattern that is not implemented is
// refused before anything runs.
func TestDeployedMappingFilterCriteria(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	ctx := t.Context()
	esmfn := testenv.Build(t, "../../internal/esm/testdata/esmfn")
	sqsc := sqs.NewFromConfig(moto.Config(t))
	env := noEndpoints("AWS_ENDPOINT_URL=" + srv.URL)
	name, queueURL := mappedFunctionWith(t, "18", func(in *lambda.CreateEventSourceMappingInput) {
		in.FunctionResponseTypes = []lambdatypes.FunctionResponseType{lambdatypes.FunctionResponseTypeReportBatchItemFailures}
		in.FilterCriteria = &lambdatypes.FilterCriteria{Filters: []lambdatypes.Filter{{Pattern: aws.String(`{"body":{"type":["charge"]}}`)}}}
	})
	row := func(name string, n int) string { return fmt.Sprintf("  %-20s %6d", name, n) }
	for _, c := range []struct {
		name          string
		args          []string
		deliver, drop int
	}{
		{"the deployed mapping's", nil, 1, 2},
		{"-filter instead", []string{"-filter", `{"body":[{"prefix":"not"}]}`, "-filter", `{"body":{"type":["refund"]}}`}, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, b := range []string{`{"type":"charge"}`, `{"type":"refund"}`, "not json"} {
				if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(b)}); err != nil {
					t.Fatal(err)
				}
			}
			r := cli(t, env, "", append(append([]string{"run", "-function", name, "-until-empty"}, c.args...), esmfn)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{"ReportBatchItemFailures, maximum concurrency none, 1 filter\n", row("filtered out", c.drop), row("deleted", c.deliver)} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr:\n%s\nwant %q", r.stderr, want)
				}
			}
			delivered := 0
			for _, o := range jsonLines[runOutput](t, r.stdout) {
				delivered += o.Records
			}
			if delivered != c.deliver {
				t.Errorf("%d records delivered; want %d", delivered, c.deliver)
			}
		})
	}
	t.Run("a pattern not implemented is refused", func(t *testing.T) {
		r := cli(t, env, "", "run", "-function", name, "-filter", `{"body":[{"wildcard":"*x"}]}`, esmfn)
		if want := "the wildcard operator is not implemented"; r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, want)
		}
	})
}
