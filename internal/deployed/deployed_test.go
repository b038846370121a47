package deployed_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// A function deployed on moto_server's Lambda, with two SQS mappings, is
// read back as a local run needs it.
func TestReadsTheDeployedFunctionAndItsMappings(t *testing.T) {
	cfg := moto.Config(t)
	ctx := t.Context()
	name := testenv.Name(t)
	lc, sqsc := lambda.NewFromConfig(cfg), sqs.NewFromConfig(cfg)

	fn := testenv.Function(t, cfg, lambda.CreateFunctionInput{
		FunctionName:  aws.String(name),
		Timeout:       aws.Int32(30),
		MemorySize:    aws.Int32(256),
		Architectures: []lambdatypes.Architecture{lambdatypes.ArchitectureArm64},
		Environment:   &lambdatypes.Environment{Variables: map[string]string{"TABLE": "t1", "A_URL": "https://example.com/x"}},
		LoggingConfig: &lambdatypes.LoggingConfig{LogFormat: lambdatypes.LogFormatJson, ApplicationLogLevel: lambdatypes.ApplicationLogLevelDebug},
	})
	queue := func(qname string, attrs map[string]string) string {
		out, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(qname), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		a, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		return a.Attributes["QueueArn"]
	}
	fifo := queue(name+".fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "180"})
	std := queue(name+"-std", map[string]string{"VisibilityTimeout": "180"})
	for _, m := range []lambda.CreateEventSourceMappingInput{
		{EventSourceArn: aws.String(fifo), BatchSize: aws.Int32(7),
			FunctionResponseTypes: []lambdatypes.FunctionResponseType{lambdatypes.FunctionResponseTypeReportBatchItemFailures},
			ScalingConfig:         &lambdatypes.ScalingConfig{MaximumConcurrency: aws.Int32(3)}},
		{EventSourceArn: aws.String(std), BatchSize: aws.Int32(100), MaximumBatchingWindowInSeconds: aws.Int32(2)},
	} {
		m.FunctionName = fn.FunctionArn
		if _, err := lc.CreateEventSourceMapping(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}

	got, err := deployed.ReadFunction(ctx, lc, name)
	if err != nil {
		t.Fatal(err)
	}
	// moto 5.2.1 keeps no LoggingConfig (AWS does): the function reads as
	// Lambda's default text logs here; TestLoggingConfig covers JSON.
	want := deployed.Function{Name: name, ARN: aws.ToString(fn.FunctionArn), Region: cfg.Region, Timeout: 30 * time.Second, MemoryMB: 256,
		LogFormat: "text", Env: []string{"A_URL=https://example.com/x", "TABLE=t1"}, Architecture: "arm64"}
	if strings.Join(got.Env, ",") != strings.Join(want.Env, ",") {
		t.Errorf("Env %q; want %q", got.Env, want.Env)
	}
	gotEnv := got.Env
	got.Env, want.Env = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadFunction:\n got %+v\nwant %+v", got, want)
	}

	got.Env = gotEnv
	ms, err := deployed.SQSMappings(ctx, lc, got)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("mappings %+v; want two", ms)
	}
	if _, err := deployed.Choose(name, ms, deployed.QueueRef{}); err == nil || !strings.Contains(err.Error(), "choose one with -queue") {
		t.Errorf("Choose of two without a queue: %v; want a refusal naming -queue", err)
	}
	if _, err := deployed.Choose(name, ms, deployed.QueueRef{Name: "other"}); err == nil || !strings.Contains(err.Error(), name+".fifo") {
		t.Errorf("Choose of an unmapped queue: %v; want a refusal listing the mapped ones", err)
	}
	for _, other := range []deployed.QueueRef{{Name: name + ".fifo", Account: "999999999999"}, {Name: name + ".fifo", Region: "eu-west-1"}} {
		if _, err := deployed.Choose(name, ms, other); err == nil {
			t.Errorf("Choose(%+v): the mapping of a queue of that name in another account or region; want none", other)
		}
	}
	m, err := deployed.Choose(name, ms, deployed.QueueRef{Name: name + ".fifo", Account: "123456789012", Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	if m.BatchSize != 7 || !m.ReportBatchItemFailures || m.MaximumConcurrency != 3 || m.Window != 0 || m.QueueARN != fifo {
		t.Errorf("FIFO mapping %+v; want batch size 7, partial batch responses, maximum concurrency 3, no window, queue %s", m, fifo)
	}
	s, err := deployed.Choose(name, ms, deployed.QueueRef{Name: name + "-std"})
	if err != nil {
		t.Fatal(err)
	}
	if s.BatchSize != 100 || s.ReportBatchItemFailures || s.MaximumConcurrency != 0 || s.Window != 2*time.Second {
		t.Errorf("standard mapping %+v; want batch size 100, whole-batch responses, no maximum, a 2 s window", s)
	}
	url, err := deployed.QueueURL(ctx, sqsc, m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(url, "/"+name+".fifo") || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("queue URL %s; want the FIFO queue's on moto_server", url)
	}

	if _, err := deployed.ReadFunction(ctx, lc, name+"-missing"); err == nil {
		t.Error("ReadFunction of a function that does not exist: no error")
	}
}

// What GetFunctionConfiguration answers for a function with JSON logs, as
// AWS documents it (moto drops LoggingConfig), and for one without
// Architectures (x86_64, Lambda's default).
func TestLoggingConfig(t *testing.T) {
	arn := "arn:aws:lambda:eu-west-1:123456789012:function:f"
	f, err := deployed.FromConfiguration(&lambda.GetFunctionConfigurationOutput{
		FunctionName: aws.String("f"), FunctionArn: aws.String(arn), Timeout: aws.Int32(3), MemorySize: aws.Int32(128),
		LoggingConfig: &lambdatypes.LoggingConfig{LogFormat: lambdatypes.LogFormatJson, ApplicationLogLevel: lambdatypes.ApplicationLogLevelWarn},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.LogFormat != "json" || f.LogLevel != "WARN" || f.Region != "eu-west-1" || f.Architecture != "x86_64" {
		t.Errorf("got %+v; want JSON logs at WARN, in eu-west-1, on x86_64", f)
	}
	f, err = deployed.FromConfiguration(&lambda.GetFunctionConfigurationOutput{FunctionArn: aws.String(arn),
		LoggingConfig: &lambdatypes.LoggingConfig{LogFormat: lambdatypes.LogFormatText, ApplicationLogLevel: lambdatypes.ApplicationLogLevelWarn}})
	if err != nil || f.LogFormat != "text" || f.LogLevel != "" {
		t.Errorf("text logs: %+v, %v; want text without a level (Lambda applies levels to JSON logs only)", f, err)
	}
	if _, err := deployed.FromConfiguration(&lambda.GetFunctionConfigurationOutput{FunctionArn: aws.String("f")}); err == nil {
		t.Error("an ARN that does not parse: no error")
	}
}
