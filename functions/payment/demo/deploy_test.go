package main_test

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/samdeploy"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The repository's root, from this package's folder, where make
// deploy-local runs.
const repoRoot = "../../.."

// requireDeployTools skips t when make or a Python with aws-sam-translator
// is missing, or fails it when the CI environment variable is set.
func requireDeployTools(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("make")
	if err == nil {
		_, err = samdeploy.FindPython()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; failing, because CI is set", err)
		}
		t.Skipf("%v; skipping", err)
	}
}

// deploy runs the demo's deploy against endpoint as make deploy-local does,
// with the repository's template, samconfig.toml [default] and transform
// script, and the builds kept in buildDir; 10 minutes at most, for a cold
// cross-compile.
func deploy(t *testing.T, endpoint, buildDir, overrides string) *demoRun {
	t.Helper()
	r := start(t, nil, "deploy", "-endpoint", endpoint, "-config-env", "default",
		"-config-file", filepath.Join(repoRoot, "samconfig.toml"), "-template", filepath.Join(repoRoot, "template.yaml"),
		"-transform", filepath.Join(repoRoot, "scripts", "sam-transform"), "-build-dir", buildDir,
		"-parameter-overrides", overrides)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Minute):
		r.interrupt(t)
		t.Fatalf("deploy did not finish within 10 minutes; stderr:\n%s", r.stderr.String())
	}
	if r.code != 0 {
		t.Fatalf("deploy: exit status %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout.String(), r.stderr.String())
	}
	return r
}

// stackState is what a test reads of the deployed stack.
type stackState struct {
	status   string
	outputs  map[string]string // by key
	physical map[string]string // physical IDs by logical ID
	params   map[string]string
}

func readStack(t *testing.T, cf *cloudformation.Client, name string) stackState {
	t.Helper()
	ctx := t.Context()
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil || len(out.Stacks) != 1 {
		t.Fatalf("DescribeStacks %s: %v (%d stacks)", name, err, len(out.Stacks))
	}
	s := out.Stacks[0]
	d := stackState{status: string(s.StackStatus), outputs: map[string]string{}, physical: map[string]string{}, params: map[string]string{}}
	for _, o := range s.Outputs {
		d.outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	for _, p := range s.Parameters {
		d.params[aws.ToString(p.ParameterKey)] = aws.ToString(p.ParameterValue)
	}
	res, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStackResources: %v", err)
	}
	for _, r := range res.StackResources {
		if id := aws.ToString(r.LogicalResourceId); id != "" { // moto lists its alarms without one
			d.physical[id] = aws.ToString(r.PhysicalResourceId)
		}
	}
	return d
}

// cfn is the transformed template the deploy kept (template.json), as
// generic JSON.
type cfn struct {
	Resources map[string]struct {
		Type       string         `json:"Type"`
		Properties map[string]any `json:"Properties"`
	} `json:"Resources"`
	Outputs map[string]struct {
		Value any `json:"Value"`
	} `json:"Outputs"`
}

func readTransformed(t *testing.T, path string) cfn {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c cfn
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// resolve returns the value of a template value that is a literal or a
// {"Ref": X}: X's physical ID or parameter value. ok is false for anything
// else.
func (d stackState) resolve(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	case map[string]any:
		if ref, isRef := v["Ref"].(string); isRef && len(v) == 1 {
			if p, ok := d.physical[ref]; ok {
				return p, true
			}
			p, ok := d.params[ref]
			return p, ok
		}
	}
	return "", false
}

// resolves says whether v resolves to want.
func (d stackState) resolves(v any, want string) bool {
	got, ok := d.resolve(v)
	return ok && got == want
}

// `make deploy-local` on moto: the stack is created, what it created is
// what the function and the local tools assume (the queues and their
// redrive, the tables' keys, the event source mapping, the function's
// settings and environment resolved to the stack's resources), what moto
// does not apply is in the transformed template, a second deploy with
// nothing new changes nothing, and a deploy with a new parameter updates
// the function in place.
func TestDeployLocal(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	testenv.RequireMotoServer(t)
	requireDeployTools(t)
	srv, err := motoserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	cfg, err := samdeploy.ReadConfig(filepath.Join(repoRoot, "samconfig.toml"), "default")
	if err != nil {
		t.Fatal(err)
	}
	awsCfg := srv.AWSConfig()
	awsCfg.Region = cfg.Region
	cf := cloudformation.NewFromConfig(awsCfg)
	db := dynamodb.NewFromConfig(awsCfg)
	sq := sqs.NewFromConfig(awsCfg)
	lm := lambda.NewFromConfig(awsCfg)
	templatePath := filepath.Join(repoRoot, "template.yaml")
	buildDir := t.TempDir()
	const gateway = "https://gateway.invalid/v1"

	// Create.
	r := deploy(t, srv.URL, buildDir, "PaymentGatewayUrl="+gateway)
	if want := "Stack " + cfg.StackName + ": CREATE_COMPLETE\n"; !strings.HasPrefix(r.stdout.String(), want) {
		t.Errorf("stdout:\n%s\nwant it to start with %q", r.stdout.String(), want)
	}
	d := readStack(t, cf, cfg.StackName)
	if d.status != "CREATE_COMPLETE" {
		t.Fatalf("stack status %s; want CREATE_COMPLETE", d.status)
	}
	tpl := readTransformed(t, filepath.Join(buildDir, "template.json"))
	for key, o := range tpl.Outputs {
		got, ok := d.outputs[key]
		if want, literal := d.resolve(o.Value); literal && got != want || !ok || got == "" {
			t.Errorf("output %s = %q; want the value of %v", key, got, o.Value)
		}
		// A queue URL is printed at the local AWS: moto's CloudFormation
		// gives the AWS form, which a fresh shell would send to AWS.
		if !strings.Contains(r.stdout.String(), key) || !strings.Contains(r.stdout.String(), samdeploy.LocalURL(srv.URL, got)) {
			t.Errorf("stdout does not show output %s = %s:\n%s", key, samdeploy.LocalURL(srv.URL, got), r.stdout.String())
		}
	}
	if strings.Contains(r.stdout.String(), "amazonaws.com") {
		t.Errorf("stdout shows a URL on AWS; want every queue URL at the local AWS %s:\n%s", srv.URL, r.stdout.String())
	}
	if len(d.outputs) != len(tpl.Outputs) {
		t.Errorf("outputs %v; want the template's %d", d.outputs, len(tpl.Outputs))
	}

	// The queues: as the local tools create them (samtemplate), and as the
	// transformed template declares them.
	queues, err := samtemplate.Queues(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]map[string]string{}
	for _, q := range queues {
		out, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(d.physical[q.LogicalID]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
		if err != nil {
			t.Fatalf("queue %s (%s): %v", q.LogicalID, d.physical[q.LogicalID], err)
		}
		attrs[q.LogicalID] = out.Attributes
	}
	for _, q := range queues {
		got := attrs[q.LogicalID]
		for k, want := range q.Attributes(attrs[q.DeadLetterQueue]["QueueArn"]) {
			if k == "RedrivePolicy" {
				want, got := normalJSON(t, want), normalJSON(t, got[k])
				if want != got {
					t.Errorf("queue %s: RedrivePolicy %s; want %s", q.LogicalID, got, want)
				}
				continue
			}
			if got[k] != want {
				t.Errorf("queue %s: %s = %q; want %q", q.LogicalID, k, got[k], want)
			}
		}
		for _, k := range []string{"FifoQueue", "ContentBasedDeduplication", "VisibilityTimeout", "MessageRetentionPeriod", "SqsManagedSseEnabled"} {
			if v, ok := tpl.Resources[q.LogicalID].Properties[k]; ok && !d.resolves(v, got[k]) {
				t.Errorf("queue %s: %s = %q; the template says %v", q.LogicalID, k, got[k], v)
			}
		}
	}
	pq, err := samtemplate.FindQueue(queues, "PaymentQueue")
	if err != nil {
		t.Fatal(err)
	}
	if !pq.FifoQueue || pq.DeadLetterQueue != "PaymentDLQ" || attrs["PaymentDLQ"]["FifoQueue"] != "true" {
		t.Errorf("PaymentQueue %+v, DLQ FIFO %q; want a FIFO queue whose DLQ is the FIFO PaymentDLQ", pq, attrs["PaymentDLQ"]["FifoQueue"])
	}

	// The tables: the keys the code uses, as the local tools create them.
	tables, err := samtemplate.Tables(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(d.physical[tb.LogicalID])})
		if err != nil {
			t.Fatalf("table %s (%s): %v", tb.LogicalID, d.physical[tb.LogicalID], err)
		}
		var want, got []string
		for _, k := range tb.KeySchema {
			want = append(want, k.AttributeName+":"+k.KeyType)
		}
		for _, a := range tb.AttributeDefinitions {
			want = append(want, a.AttributeName+"="+a.AttributeType)
		}
		for _, k := range out.Table.KeySchema {
			got = append(got, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
		}
		for _, a := range out.Table.AttributeDefinitions {
			got = append(got, aws.ToString(a.AttributeName)+"="+string(a.AttributeType))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s: key %v; want %v", tb.LogicalID, got, want)
		}
		if mode := out.Table.BillingModeSummary; mode == nil || string(mode.BillingMode) != tb.BillingMode {
			t.Errorf("table %s: billing mode %+v; want %s", tb.LogicalID, mode, tb.BillingMode)
		}
	}
	// The ledger row's key, which the function gives dynamostore as the
	// record's (its KeyAttr).
	for id, key := range map[string]string{"PaymentsTable": "payment_id:HASH"} {
		tb, err := samtemplate.Find(tables, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(tb.KeySchema) != 1 || tb.KeySchema[0].AttributeName+":"+tb.KeySchema[0].KeyType != key {
			t.Errorf("table %s: key %+v; want %s, the code's", id, tb.KeySchema, key)
		}
	}

	// The function and its event source mapping.
	functions, err := samtemplate.Functions(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := samtemplate.FindFunction(functions, "PaymentFunction")
	if err != nil {
		t.Fatal(err)
	}
	fnName := d.physical["PaymentFunction"]
	if fnName == "" || d.outputs["PaymentFunctionName"] != fnName {
		t.Fatalf("function %q, output PaymentFunctionName %q; want the stack's function", fnName, d.outputs["PaymentFunctionName"])
	}
	conf, err := lm.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Fatal(err)
	}
	if int(aws.ToInt32(conf.Timeout)) != fn.Timeout || int(aws.ToInt32(conf.MemorySize)) != fn.MemorySize ||
		conf.Runtime != "provided.al2023" || aws.ToString(conf.Handler) != "bootstrap" {
		t.Errorf("function: timeout %d, memory %d, runtime %s, handler %s; want %d, %d, provided.al2023, bootstrap",
			aws.ToInt32(conf.Timeout), aws.ToInt32(conf.MemorySize), conf.Runtime, aws.ToString(conf.Handler), fn.Timeout, fn.MemorySize)
	}
	if role := aws.ToString(conf.Role); !strings.HasSuffix(role, ":role/"+d.physical["PaymentExecutionRole"]) {
		t.Errorf("function role %s; want the stack's PaymentExecutionRole (%s)", role, d.physical["PaymentExecutionRole"])
	}
	zip, err := os.ReadFile(filepath.Join(buildDir, "PaymentFunction.zip"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(zip)
	if got, want := aws.ToString(conf.CodeSha256), base64.StdEncoding.EncodeToString(sum[:]); got != want || conf.CodeSize != int64(len(zip)) {
		t.Errorf("function code: sha256 %s, %d bytes; want the uploaded zip's, %s, %d bytes", got, conf.CodeSize, want, len(zip))
	}
	// Every variable of the environment, with its references resolved to
	// the stack's resources and parameters.
	env := conf.Environment.Variables
	tplEnv := tpl.Resources["PaymentFunction"].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
	for k, v := range tplEnv {
		want, ok := d.resolve(v)
		if !ok {
			t.Errorf("environment %s: %v is neither a literal nor a Ref", k, v)
		}
		if env[k] != want {
			t.Errorf("environment %s = %q; want %q (%v)", k, env[k], want, v)
		}
	}
	if len(env) != len(tplEnv) {
		t.Errorf("environment %v; want the template's %d variables", env, len(tplEnv))
	}
	for k, want := range map[string]string{
		"PAYMENTS_TABLE":        d.outputs["PaymentsTableName"],
		"DEAD_LETTER_QUEUE_URL": d.outputs["PaymentDLQUrl"],
		"PAYMENT_GATEWAY_URL":   gateway,
		"EVENTS_QUEUE_URL":      d.outputs["PaymentEventsQueueUrl"],
	} {
		if env[k] != want || want == "" {
			t.Errorf("environment %s = %q; want %q", k, env[k], want)
		}
	}

	events, err := samtemplate.SQSEvents(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := samtemplate.FindSQSEvent(events, "PaymentFunction")
	if err != nil {
		t.Fatal(err)
	}
	esms, err := lm.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Fatal(err)
	}
	if len(esms.EventSourceMappings) != 1 {
		t.Fatalf("%d event source mappings; want 1", len(esms.EventSourceMappings))
	}
	m := esms.EventSourceMappings[0]
	if got, want := aws.ToString(m.EventSourceArn), attrs[ev.Queue]["QueueArn"]; got != want {
		t.Errorf("event source %s; want %s's ARN %s", got, ev.Queue, want)
	}
	var maxConcurrency int32
	if m.ScalingConfig != nil {
		maxConcurrency = aws.ToInt32(m.ScalingConfig.MaximumConcurrency)
	}
	reportsFailures := slices.ContainsFunc(m.FunctionResponseTypes, func(f lambdatypes.FunctionResponseType) bool {
		return f == lambdatypes.FunctionResponseTypeReportBatchItemFailures
	})
	if int(aws.ToInt32(m.BatchSize)) != ev.BatchSize || int(maxConcurrency) != ev.MaximumConcurrency || reportsFailures != ev.ReportBatchItemFailures || !reportsFailures {
		t.Errorf("event source mapping: batch size %d, maximum concurrency %d, ReportBatchItemFailures %v; want %d, %d, true",
			aws.ToInt32(m.BatchSize), maxConcurrency, reportsFailures, ev.BatchSize, ev.MaximumConcurrency)
	}
	if !strings.HasSuffix(aws.ToString(m.FunctionArn), ":function:"+fnName) {
		t.Errorf("event source mapping invokes %s; want %s", aws.ToString(m.FunctionArn), fnName)
	}

	checkRelay(ctx, t, lm, d, attrs)

	// What moto does not apply, read from the transformed template that
	// was deployed, and from the package.
	checkNotApplied(t, tpl, d, attrs, buildDir)

	// Again, with nothing new: nothing to change.
	r = deploy(t, srv.URL, buildDir, "PaymentGatewayUrl="+gateway)
	if !strings.Contains(r.stdout.String(), "CREATE_COMPLETE (no changes to deploy)") || !strings.Contains(r.stderr.String(), "no changes to deploy") {
		t.Errorf("second deploy: stdout:\n%s\nstderr:\n%s\nwant no changes", r.stdout.String(), r.stderr.String())
	}
	if again := readStack(t, cf, cfg.StackName); again.status != "CREATE_COMPLETE" || fmt.Sprint(again.outputs) != fmt.Sprint(d.outputs) {
		t.Errorf("after the second deploy: %s, outputs %v; want CREATE_COMPLETE and the same outputs", again.status, again.outputs)
	}

	// A new gateway URL: the function is updated in place, nothing else
	// replaced.
	const gateway2 = "https://gateway2.invalid/v1"
	r = deploy(t, srv.URL, buildDir, "PaymentGatewayUrl="+gateway2)
	updated := readStack(t, cf, cfg.StackName)
	if updated.status != "UPDATE_COMPLETE" || !strings.HasPrefix(r.stdout.String(), "Stack "+cfg.StackName+": UPDATE_COMPLETE\n") {
		t.Errorf("third deploy: stack %s, stdout:\n%s\nwant UPDATE_COMPLETE", updated.status, r.stdout.String())
	}
	if fmt.Sprint(updated.physical) != fmt.Sprint(d.physical) {
		t.Errorf("resources after the update %v; want the same as before %v", updated.physical, d.physical)
	}
	conf, err = lm.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(fnName)})
	if err != nil {
		t.Fatal(err)
	}
	if got := conf.Environment.Variables["PAYMENT_GATEWAY_URL"]; got != gateway2 {
		t.Errorf("after the update PAYMENT_GATEWAY_URL = %q; want %q", got, gateway2)
	}
	esms2, err := lm.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fnName)})
	if err != nil || len(esms2.EventSourceMappings) != 1 || aws.ToString(esms2.EventSourceMappings[0].UUID) != aws.ToString(m.UUID) {
		t.Errorf("after the update: event source mappings %v (%v); want the one from before, %s", esms2, err, aws.ToString(m.UUID))
	}
}

// checkNotApplied checks, in the transformed template that was deployed
// and in the package, the settings moto accepts but does not apply (or
// does not report): the payments table's TTL (dynamostore's "expiration",
// for the locks of owners that died), the payments and ledger tables'
// point-in-time recovery and encryption, the
// function's arm64 architecture and JSON logging, the DLQ's redrive-allow
// policy naming the payment queue, the six alarms, the function's tags.
func checkNotApplied(t *testing.T, tpl cfn, d stackState, queueAttrs map[string]map[string]string, buildDir string) {
	t.Helper()
	props := func(id string) map[string]any { return tpl.Resources[id].Properties }
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got, want := js(props("PaymentsTable")["TimeToLiveSpecification"]), `{"AttributeName":"expiration","Enabled":true}`; got != want {
		t.Errorf("PaymentsTable TimeToLiveSpecification %s; want %s", got, want)
	}
	for _, id := range []string{"PaymentsTable", "LedgerTable"} {
		if got := js(props(id)["PointInTimeRecoverySpecification"]) + js(props(id)["SSESpecification"]); got != `{"PointInTimeRecoveryEnabled":true}{"SSEEnabled":true}` {
			t.Errorf("%s: point-in-time recovery and SSE %s; want both enabled", id, got)
		}
	}
	archs, _ := props("PaymentFunction")["Architectures"].([]any)
	if len(archs) != 1 {
		t.Fatalf("PaymentFunction Architectures %v; want one", archs)
	}
	arch, ok := d.resolve(archs[0])
	if !ok || arch != "arm64" {
		t.Errorf("PaymentFunction Architectures %v = %q; want arm64", archs, arch)
	}
	bin, err := elf.Open(filepath.Join(buildDir, "PaymentFunction", "bootstrap"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if bin.Machine != elf.EM_AARCH64 {
		t.Errorf("the deployed bootstrap is %v; want arm64 (EM_AARCH64)", bin.Machine)
	}
	if got := js(props("PaymentFunction")["LoggingConfig"]); !strings.Contains(got, `"LogFormat":"JSON"`) || !strings.Contains(got, `"LogGroup":{"Ref":"PaymentFunctionLogGroup"}`) {
		t.Errorf("PaymentFunction LoggingConfig %s; want JSON logs into PaymentFunctionLogGroup", got)
	}
	if got := js(props("PaymentFunction")["Tags"]); !strings.Contains(got, `{"Key":"app","Value":"lambdakit"}`) {
		t.Errorf("PaymentFunction Tags %s; want app=lambdakit", got)
	}
	// The DLQ's redrive-allow policy names the payment queue by an ARN it
	// builds with !Sub: built here the same way, it is the queue's ARN.
	policy, _ := props("PaymentDLQ")["RedriveAllowPolicy"].(map[string]any)
	sources, _ := policy["sourceQueueArns"].([]any)
	if len(sources) != 1 {
		t.Fatalf("PaymentDLQ RedriveAllowPolicy %v; want one source queue", policy)
	}
	sub, _ := sources[0].(map[string]any)["Fn::Sub"].(string)
	queueARN := queueAttrs["PaymentQueue"]["QueueArn"]
	parts := strings.Split(queueARN, ":") // arn:partition:sqs:region:account:name
	if len(parts) != 6 {
		t.Fatalf("PaymentQueue ARN %q", queueARN)
	}
	built := strings.NewReplacer("${AWS::Partition}", parts[1], "${AWS::Region}", parts[3], "${AWS::AccountId}", parts[4], "${AWS::StackName}", strings.TrimSuffix(parts[5], "-queue.fifo")).Replace(sub)
	if policy["redrivePermission"] != "byQueue" || built != queueARN {
		t.Errorf("PaymentDLQ RedriveAllowPolicy %v: allows %q; want byQueue, the payment queue %s", policy, built, queueARN)
	}
	alarms := 0
	for _, r := range tpl.Resources {
		if r.Type == "AWS::CloudWatch::Alarm" {
			alarms++
		}
	}
	if alarms != 6 {
		t.Errorf("the transformed template has %d alarms; want 6", alarms)
	}
}

// normalJSON re-encodes a JSON object with its numbers as strings, so that
// {"maxReceiveCount": 5} and {"maxReceiveCount": "5"} compare equal.
func normalJSON(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	for k, v := range m {
		m[k] = fmt.Sprint(v)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// The deploy talks to a local AWS only: an endpoint off this machine is a
// usage error, before anything is built or sent.
func TestDeployRefusesAnEndpointOffThisMachine(t *testing.T) {
	r := demo(t, nil, "deploy", "-endpoint", "https://cloudformation.us-east-1.amazonaws.com:443")
	if r.code != 2 || !strings.Contains(r.stderr.String(), "not on this machine's loopback") {
		t.Errorf("exit status %d; stderr:\n%s\nwant 2 and why", r.code, r.stderr.String())
	}
}

// Nothing listening at the endpoint: the deploy says so, and how to start
// a local AWS, before it builds anything (exit status 3).
func TestDeployWithoutALocalAWS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close()
	r := demo(t, nil, "deploy", "-endpoint", endpoint, "-config-file", filepath.Join(repoRoot, "samconfig.toml"),
		"-template", filepath.Join(repoRoot, "template.yaml"), "-transform", filepath.Join(repoRoot, "scripts", "sam-transform"))
	stderr := r.stderr.String()
	if r.code != 3 || !strings.Contains(stderr, "no local AWS answers at "+endpoint) || !strings.Contains(stderr, "demo local") || strings.Contains(stderr, "building") {
		t.Errorf("exit status %d; stderr:\n%s\nwant 3, the endpoint named, how to start one, and no build", r.code, stderr)
	}
}

// checkRelay checks the relay as deployed: its dead-letter queue, the
// record's attribute names, and its mapping on the payments table's
// stream as the template sets it
// (as moto stores it; moto's mappings move nothing under the launcher,
// see internal/motoserver).
func checkRelay(ctx context.Context, t *testing.T, lm *lambda.Client, d stackState, queueAttrs map[string]map[string]string) {
	t.Helper()
	name := d.physical["RelayFunction"]
	if name == "" || d.outputs["RelayFunctionName"] != name {
		t.Fatalf("relay %q, output RelayFunctionName %q; want the stack's relay", name, d.outputs["RelayFunctionName"])
	}
	conf, err := lm.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := conf.Environment.Variables["DEAD_LETTER_QUEUE_URL"], d.outputs["RelayFailureQueueUrl"]; got != want || want == "" {
		t.Errorf("relay DEAD_LETTER_QUEUE_URL %q; want the failure queue %q", got, want)
	}
	if k, st := conf.Environment.Variables["RECORD_KEY_ATTR"], conf.Environment.Variables["RECORD_STATUS_ATTR"]; k != "payment_id" || st != "record_status" {
		t.Errorf("relay RECORD_KEY_ATTR %q, RECORD_STATUS_ATTR %q; want the payment function's, payment_id and record_status", k, st)
	}
	if role := aws.ToString(conf.Role); !strings.HasSuffix(role, ":role/"+d.physical["RelayExecutionRole"]) {
		t.Errorf("relay role %s; want the stack's RelayExecutionRole (%s)", role, d.physical["RelayExecutionRole"])
	}
	esms, err := lm.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(esms.EventSourceMappings) != 1 {
		t.Fatalf("relay: %d event source mappings; want 1", len(esms.EventSourceMappings))
	}
	m := esms.EventSourceMappings[0]
	if arn := aws.ToString(m.EventSourceArn); !strings.Contains(arn, ":table/"+d.outputs["PaymentsTableName"]+"/stream/") {
		t.Errorf("relay's event source %s; want the payments table %s's stream", arn, d.outputs["PaymentsTableName"])
	}
	var dest string
	if m.DestinationConfig != nil && m.DestinationConfig.OnFailure != nil {
		dest = aws.ToString(m.DestinationConfig.OnFailure.Destination)
	}
	reports := slices.Contains(m.FunctionResponseTypes, lambdatypes.FunctionResponseTypeReportBatchItemFailures)
	if m.StartingPosition != lambdatypes.EventSourcePositionTrimHorizon || aws.ToInt32(m.BatchSize) != 10 || !reports ||
		!aws.ToBool(m.BisectBatchOnFunctionError) || aws.ToInt32(m.MaximumRetryAttempts) != 10 || aws.ToInt32(m.MaximumRecordAgeInSeconds) != 21600 ||
		dest != queueAttrs["RelayFailureQueue"]["QueueArn"] {
		t.Errorf("relay mapping: start %s, batch %d, ReportBatchItemFailures %v, bisect %v, retries %d, max record age %d s, on failure %q; want TRIM_HORIZON, 10, true, true, 10, 21600, %s",
			m.StartingPosition, aws.ToInt32(m.BatchSize), reports, aws.ToBool(m.BisectBatchOnFunctionError), aws.ToInt32(m.MaximumRetryAttempts),
			aws.ToInt32(m.MaximumRecordAgeInSeconds), dest, queueAttrs["RelayFailureQueue"]["QueueArn"])
	}
	var patterns []string
	if m.FilterCriteria != nil {
		for _, f := range m.FilterCriteria.Filters {
			patterns = append(patterns, aws.ToString(f.Pattern))
		}
	}
	want := `{"eventName":["INSERT","MODIFY"],"dynamodb":{"NewImage":{"record_status":{"S":["COMPLETED"]},"messages":{"L":{"M":{"queueUrl":{"S":[{"exists":true}]}}}}}}}`
	if len(patterns) != 1 || strings.ReplaceAll(patterns[0], " ", "") != want {
		t.Errorf("relay mapping filters %q; want completed records with messages only, %s", patterns, want)
	}
}
