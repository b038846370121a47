package main_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/samdeploy"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// ownTemplate is a user's own stack, outside this repository: a queue, a
// table, a Go function on provided.al2023 (CodeUri a Go main package of a
// module of its own, no Makefile) fed by the queue, and a Python function,
// which is deployed but not run locally.
const ownTemplate = `AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Resources:
  OrdersQueue:
    Type: AWS::SQS::Queue
  OrdersTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: id, AttributeType: S}]
      KeySchema: [{AttributeName: id, KeyType: HASH}]
  OrdersFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: orders
      Handler: bootstrap
      Runtime: provided.al2023
      Architectures: [arm64]
      Environment:
        Variables:
          TABLE: !Ref OrdersTable
      Events:
        Orders:
          Type: SQS
          Properties:
            Queue: !GetAtt OrdersQueue.Arn
  ReportFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: report
      Handler: index.handler
      Runtime: python3.12
Outputs:
  OrdersQueueUrl:
    Value: !Ref OrdersQueue
  OrdersTableName:
    Value: !Ref OrdersTable
`

// requireTranslator skips t without a Python that has aws-sam-translator,
// or fails it under CI.
func requireTranslator(t *testing.T) {
	t.Helper()
	if _, err := samdeploy.FindPython(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; failing, because CI is set", err)
		}
		t.Skipf("%v; skipping", err)
	}
}

// ownStack writes ownTemplate and its code into a new folder and returns
// the template's path.
func ownStack(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, dir, "template.yaml", ownTemplate)
	for name, content := range map[string]string{
		"orders/go.mod":   "module example.com/orders\n\ngo 1.22\n",
		"orders/main.go":  "package main\n\nfunc main() {}\n",
		"report/index.py": "def handler(event, context):\n    return None\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, name, content)
	}
	return filepath.Join(dir, "template.yaml")
}

// deploy-local deploys a user's own template, with no samconfig.toml and
// no Makefile: the Go function is built for Linux on its architecture, the
// queue's URL is printed at the local AWS, with the lines for a shell, and
// the Python function is named as not run locally.
func TestDeployLocalDeploysAnOwnTemplate(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH to build the function")
	}
	requireTranslator(t)
	srv := moto.Server(t)
	stack := testenv.Name(t)
	buildDir := t.TempDir()
	r := lambdakit(t, noEndpoints(), "deploy-local", "-endpoint", srv.URL, "-stack-name", stack, "-template", ownStack(t), "-build-dir", buildDir)
	if r.code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	queueURL := regexp.MustCompile(`(?m)^  OrdersQueueUrl +(\S+)$`).FindStringSubmatch(r.stdout)
	if queueURL == nil || !strings.HasPrefix(queueURL[1], srv.URL+"/") {
		t.Fatalf("stdout:\n%s\nwant OrdersQueueUrl at %s", r.stdout, srv.URL)
	}
	for _, want := range []string{
		"Stack " + stack + ": CREATE_COMPLETE",
		"export AWS_ENDPOINT_URL=" + srv.URL + " AWS_REGION=",
		"export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true",
		"Function ReportFunction: runtime python3.12 is deployed but not run locally",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout:\n%s\nwant %q", r.stdout, want)
		}
	}
	if strings.Contains(r.stdout, "Function OrdersFunction") {
		t.Errorf("stdout:\n%s\nwant nothing said of OrdersFunction, which runs locally", r.stdout)
	}

	cfg := moto.Config(t)
	ctx := t.Context()
	if _, err := sqs.NewFromConfig(cfg).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL[1])}); err != nil {
		t.Errorf("the printed queue URL: %v", err)
	}
	table := regexp.MustCompile(`(?m)^  OrdersTableName +(\S+)$`).FindStringSubmatch(r.stdout)
	if table == nil {
		t.Fatalf("stdout:\n%s\nwant OrdersTableName", r.stdout)
	}
	if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table[1])}); err != nil {
		t.Errorf("the printed table: %v", err)
	}
	lc := lambda.NewFromConfig(cfg)
	mappings, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range mappings.EventSourceMappings {
		fn, err := lc.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: m.FunctionArn})
		if err == nil && strings.HasPrefix(aws.ToString(fn.Configuration.FunctionName), stack+"-OrdersFunction") {
			found = true
		}
	}
	if !found {
		t.Errorf("no event source mapping of %s's OrdersFunction on the local AWS", stack)
	}
	// moto's Lambda reports x86_64 whatever the template says: the
	// architecture is checked on the bootstrap that was built.
	bin, err := elf.Open(filepath.Join(buildDir, "OrdersFunction", "bootstrap"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if bin.Machine != elf.EM_AARCH64 {
		t.Errorf("OrdersFunction's bootstrap is built for %v; want arm64, its Architectures", bin.Machine)
	}
}

// Without a stack name, and no samconfig.toml to take it from, or without
// an endpoint, deploy-local stops before anything is built.
func TestDeployLocalUsageErrors(t *testing.T) {
	tpl := ownStack(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-endpoint", "http://127.0.0.1:1", "-template", tpl}, "no -stack-name, and no samconfig.toml"},
		{[]string{"-stack-name", "s", "-template", tpl}, "no -endpoint and no AWS_ENDPOINT_URL"},
		{[]string{"-endpoint", "https://cloudformation.us-east-1.amazonaws.com", "-stack-name", "s", "-template", tpl}, "want the local AWS's URL"},
	} {
		r := lambdakit(t, noEndpoints(), append([]string{"deploy-local"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("deploy-local %v: exit status %d, stderr:\n%s\nwant 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		checkShortUsage(t, r, "deploy-local")
	}
}
