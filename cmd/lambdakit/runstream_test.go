package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// run -stream -function takes the deployed function's settings, as with
// a queue: its name in the log, its memory in the REPORT lines; and its
// mapping's FilterCriteria on that stream: a record no pattern matches is
// passed over without an invocation. run -stream -template takes the
// FilterCriteria of the template function's stream event alike.
func TestRunStreamTakesTheDeployedFunctionsSettings(t *testing.T) {
	srv := moto.Server(t)
	cfg := moto.Config(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/streamfn")
	deployed := testenv.Function(t, cfg, lambda.CreateFunctionInput{MemorySize: aws.Int32(777)})
	db := dynamodb.NewFromConfig(cfg)
	table, stream := testenv.StreamTable(t, db, "", "id")
	for i, cmd := range []string{"ok", "skip"} {
		if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: fmt.Sprint("id", i)}, "cmd": &types.AttributeValueMemberS{Value: cmd},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	pattern := `{"dynamodb": {"NewImage": {"cmd": {"S": ["ok"]}}}}`
	if _, err := lambda.NewFromConfig(cfg).CreateEventSourceMapping(t.Context(), &lambda.CreateEventSourceMappingInput{
		FunctionName: deployed.FunctionName, EventSourceArn: aws.String(stream), Enabled: aws.Bool(false),
		StartingPosition: lambdatypes.EventSourcePositionTrimHorizon,
		FilterCriteria:   &lambdatypes.FilterCriteria{Filters: []lambdatypes.Filter{{Pattern: aws.String(pattern)}}},
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tpl := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(tpl, []byte(`Transform: AWS::Serverless-2016-10-31
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Handler: bootstrap
      Runtime: provided.al2023
      Events:
        Changes:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt T.StreamArn
            StartingPosition: TRIM_HORIZON
            FilterCriteria:
              Filters:
                - Pattern: '`+pattern+`'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"deployed", []string{"-function", aws.ToString(deployed.FunctionName)},
			[]string{"lambdakit run: function " + aws.ToString(deployed.FunctionName) + " at " + srv.URL, "Memory Size: 777 MB", "on the stream: 1 filter"}},
		{"template", []string{"-template", tpl}, []string{"the template's event Changes: 1 filter"}},
	} {
		log := t.TempDir()
		env := noEndpoints("AWS_ENDPOINT_URL="+srv.URL, "STREAMFN_DIR="+log)
		r := cli(t, env, "", append(append([]string{"run", "-stream", stream}, c.args...), "-until-empty", "-timeout", "5s", fn)...)
		if r.code != 0 {
			t.Fatalf("%s: exit status %d; want 0\nstderr:\n%s", c.name, r.code, r.stderr)
		}
		for _, want := range c.want {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr does not say %q:\n%s", c.name, want, r.stderr)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(log, "log")); strings.Count(string(b), "\n") != 1 {
			t.Errorf("%s: the function got %q; want the one record the filter matches", c.name, b)
		}
	}

	// Two stream events: which one this stream feeds cannot be told from
	// the template, so run refuses to guess (neither no filter nor the
	// other event's) and asks for -filter, before reading a record.
	two := filepath.Join(dir, "two-streams.yaml")
	b, err := os.ReadFile(tpl)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(b)[strings.Index(string(b), "        Changes:"):], "Changes:", "Others:", 1)
	if err := os.WriteFile(two, append(b, other...), 0o600); err != nil {
		t.Fatal(err)
	}
	log := t.TempDir()
	r := cli(t, noEndpoints("AWS_ENDPOINT_URL="+srv.URL, "STREAMFN_DIR="+log), "", "run", "-stream", stream, "-template", two, "-until-empty", "-timeout", "5s", fn)
	if r.code != 2 || !strings.Contains(r.stderr, "function Fn has 2 DynamoDB events (Changes, Others)") || !strings.Contains(r.stderr, "-filter") {
		t.Errorf("two stream events: exit status %d; want 2 naming both events and -filter\nstderr:\n%s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(log, "log")); len(b) != 0 {
		t.Errorf("two stream events: the function got %q; want nothing", b)
	}
}

// run -stream plays a DynamoDB stream's mapping on moto_server: a record
// the function names is read again, the others once.
func TestRunStream(t *testing.T) {
	srv := moto.Server(t)
	cfg := moto.Config(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/streamfn")
	db := dynamodb.NewFromConfig(cfg)
	table, stream := testenv.StreamTable(t, db, "", "id")
	for i, cmd := range []string{"ok", "fail@1", "ok"} {
		if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: fmt.Sprint("id", i)}, "cmd": &types.AttributeValueMemberS{Value: cmd},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	env := noEndpoints("AWS_ENDPOINT_URL="+srv.URL, "STREAMFN_DIR="+dir)

	r := cli(t, env, "", "run", "-stream", stream, "-until-empty", "-report-batch-item-failures", "-timeout", "5s", fn)
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"lambdakit run: stream " + stream + " at " + srv.URL + " (AWS_ENDPOINT_URL)\n",
		"in batchItemFailures; read again from",
		"stopped: the stream has no record past its checkpoints",
		"invocations               2", "records                   5", "retries                   1", "discarded                 0",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	outs := jsonLines[map[string]any](t, r.stdout)
	if len(outs) != 2 || outs[0]["retryFrom"] == nil || outs[1]["first"] != outs[0]["retryFrom"] {
		t.Errorf("stdout:\n%s\nwant a batch read again from the named record, then the rest", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "log")); strings.Count(string(b), "\n") != 4 {
		t.Errorf("the function got %q; want 4 deliveries: 3 records, one of them twice", b)
	}

	t.Run("refusals", func(t *testing.T) {
		rec := newConnectRecorder(t)
		offline := noEndpoints("AWS_MAX_ATTEMPTS=1", "HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL)
		for _, c := range []struct {
			env  []string
			args []string
			want string
		}{
			{offline, []string{"-stream", "arn:aws:dynamodb:us-east-1:123456789012:table/T/stream/2026-01-01T00:00:00.000"},
				"is on AWS: its calls would go to https://streams.dynamodb.us-east-1.amazonaws.com"},
			{env, []string{"-stream", stream, "-queue", "http://127.0.0.1:1/123456789012/q"}, "-queue is for a queue's mapping"},
			{env, []string{"-stream", "arn:aws:sqs:us-east-1:123456789012:q"}, "want a DynamoDB stream's ARN"},
			{env, []string{"-max-retry-attempts", "3", "-queue", "http://127.0.0.1:1/123456789012/q"}, "-max-retry-attempts is for a stream's mapping"},
			{env, []string{"-stream", stream, "-max-retry-attempts", "-2"}, "-max-retry-attempts -2: want -1 to 10000"},
		} {
			r := cli(t, c.env, "", append(append([]string{"run"}, c.args...), fn)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%v: exit status %d, stderr:\n%s\nwant 2 and %q", c.args, r.code, r.stderr, c.want)
			}
		}
		if hosts := rec.Hosts(); len(hosts) != 0 {
			t.Errorf("calls to %v; want none before the refusals", hosts)
		}
	})
}

// run -stream plays a Kinesis stream's mapping, with -bisect isolating a
// poison record and -on-failure taking its invocation record, the queue
// named by its ARN.
func TestRunKinesisBisectOnFailure(t *testing.T) {
	srv := moto.Server(t)
	cfg := moto.Config(t)
	fn := testenv.Build(t, "../../internal/esm/testdata/streamfn")
	kc := kinesis.NewFromConfig(cfg)
	stream := testenv.KinesisStream(t, kc, 1)
	var seqs []string
	for _, cmd := range []string{"ok", "ok", "error@100", "ok"} {
		out, err := kc.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamARN: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte(cmd)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}
	sqsc := sqs.NewFromConfig(cfg)
	queue := testenv.Queue(t, sqsc, false, nil)
	attrs, err := sqsc.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queue), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	env := noEndpoints("AWS_ENDPOINT_URL="+srv.URL, "STREAMFN_DIR="+t.TempDir())

	r := cli(t, env, "", "run", "-stream", stream, "-until-empty", "-report-batch-item-failures", "-timeout", "5s",
		"-bisect", "-max-retry-attempts", "0", "-on-failure", attrs.Attributes["QueueArn"], fn)
	if r.code != 1 {
		t.Fatalf("exit status %d; want 1 (a record discarded)\nstderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"lambdakit run: stream " + stream + " at " + srv.URL + " (AWS_ENDPOINT_URL)\n",
		"split in two: 2 and 2 records", "split in two: 1 and 1 records",
		"bisections                2", "discarded                 1", "sent                      1",
		"to " + queue + ": shardId-000000000000 records " + seqs[2] + " to " + seqs[2] + " (1)\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	var sent string
	for _, o := range jsonLines[map[string]any](t, r.stdout) {
		if id, ok := o["sent"].(string); ok {
			sent = id
		}
	}
	msgs := testenv.Drain(t, sqsc, queue)
	if len(msgs) != 1 || aws.ToString(msgs[0].MessageId) != sent {
		t.Fatalf("queue got %d messages; want the one stdout names (%q)", len(msgs), sent)
	}
	var rec struct {
		KinesisBatchInfo struct {
			BatchSize           int
			StartSequenceNumber string
			StreamArn           string
		}
	}
	if err := json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &rec); err != nil || rec.KinesisBatchInfo.BatchSize != 1 ||
		rec.KinesisBatchInfo.StartSequenceNumber != seqs[2] || rec.KinesisBatchInfo.StreamArn != stream {
		t.Errorf("invocation record %s (%v); want the poison alone, in KinesisBatchInfo", aws.ToString(msgs[0].Body), err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-bisect", "-queue", queue}, "-bisect is for a stream's mapping"},
		{[]string{"-on-failure", queue, "-queue", queue}, "-on-failure is for a stream's mapping"},
		{[]string{"-stream", stream, "-on-failure", "arn:aws:sns:us-east-1:123456789012:topic"}, "want an SQS queue's URL or ARN"},
		{[]string{"-stream", "arn:aws:kinesis:us-east-1:123456789012:stream/"}, "or a Kinesis data stream's"},
	} {
		r := cli(t, env, "", append(append([]string{"run"}, c.args...), fn)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit status %d, stderr:\n%s\nwant 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
