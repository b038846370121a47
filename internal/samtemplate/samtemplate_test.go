package samtemplate_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

func TestTablesReadsTheProjectTemplate(t *testing.T) {
	tables, err := samtemplate.Tables("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pay, err := samtemplate.Find(tables, "PaymentsTable")
	if err != nil {
		t.Fatal(err)
	}
	if len(pay.KeySchema) != 1 || pay.KeySchema[0].AttributeName != "payment_id" || pay.KeySchema[0].KeyType != "HASH" || pay.BillingMode != "PAY_PER_REQUEST" {
		t.Errorf("got payments table %+v; want payment_id HASH, on demand", pay)
	}
	// The idempotency records live on the ledger rows: TTL on
	// dynamostore's expiration, for the locks of owners that died.
	if pay.TimeToLiveSpecification == nil || !pay.TimeToLiveSpecification.Enabled || pay.TimeToLiveSpecification.AttributeName != "expiration" {
		t.Errorf("got payments table TTL %+v; want enabled on expiration", pay.TimeToLiveSpecification)
	}
	// The relay reads the payments table's stream: the events ride on
	// the rows, and the relay compares old and new images.
	if pay.StreamSpecification == nil || pay.StreamSpecification.StreamViewType != "NEW_AND_OLD_IMAGES" {
		t.Errorf("got payments table stream %+v; want new and old images", pay.StreamSpecification)
	}
	if _, err := samtemplate.Find(tables, "Nope"); err == nil {
		t.Error("Find of a missing table: got nil error")
	}
}

func TestQueuesReadsTheProjectTemplate(t *testing.T) {
	queues, err := samtemplate.Queues("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	q, err := samtemplate.FindQueue(queues, "PaymentQueue")
	if err != nil {
		t.Fatal(err)
	}
	want := samtemplate.Queue{LogicalID: "PaymentQueue", FifoQueue: true, VisibilityTimeout: 360, DeadLetterQueue: "PaymentDLQ", MaxReceiveCount: 5}
	if q != want {
		t.Errorf("got %+v; want %+v", q, want)
	}
	dlq, err := samtemplate.FindQueue(queues, "PaymentDLQ")
	if err != nil {
		t.Fatal(err)
	}
	if want := (samtemplate.Queue{LogicalID: "PaymentDLQ", FifoQueue: true}); dlq != want {
		t.Errorf("got %+v; want %+v", dlq, want)
	}
	if _, err := samtemplate.FindQueue(queues, "Nope"); err == nil {
		t.Error("FindQueue of a missing queue: got nil error")
	}

	attrs := q.Attributes("arn:aws:sqs:us-east-1:123456789012:dlq.fifo")
	wantAttrs := map[string]string{
		"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "360",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:dlq.fifo","maxReceiveCount":"5"}`,
	}
	if len(attrs) != len(wantAttrs) {
		t.Errorf("got attributes %v; want %v", attrs, wantAttrs)
	}
	for k, v := range wantAttrs {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q; want %q", k, attrs[k], v)
		}
	}
	// Scaled down, as a test or the demo does.
	q.VisibilityTimeout, q.MaxReceiveCount = 6, 2
	attrs = q.Attributes("arn:x")
	if attrs["VisibilityTimeout"] != "6" || attrs["RedrivePolicy"] != `{"deadLetterTargetArn":"arn:x","maxReceiveCount":"2"}` {
		t.Errorf("scaled down: got %v; want VisibilityTimeout 6 and maxReceiveCount 2", attrs)
	}
	if _, err := q.Create(t.Context(), nil, "q.fifo", ""); err == nil {
		t.Error("Create without the DLQ's ARN: got nil error")
	}
}

func TestSQSEventsReadsTheProjectTemplate(t *testing.T) {
	evs, err := samtemplate.SQSEvents("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []samtemplate.SQSEvent{
		{Function: "LedgerFunction", Name: "PaymentEvents", Queue: "PaymentEventsQueue",
			BatchSize: 10, MaximumConcurrency: 2, ReportBatchItemFailures: true, Timeout: 30},
		{Function: "PaymentFunction", Name: "PaymentQueueEvent", Queue: "PaymentQueue",
			BatchSize: 10, MaximumConcurrency: 5, ReportBatchItemFailures: true, Timeout: 60},
	}
	if !slices.Equal(evs, want) {
		t.Errorf("got %+v; want %+v", evs, want)
	}
	if ev, err := samtemplate.FindSQSEvent(evs, "PaymentFunction"); err != nil || ev != want[1] {
		t.Errorf("FindSQSEvent(PaymentFunction) = %+v, %v; want %+v", ev, err, want[1])
	}
	if _, err := samtemplate.FindSQSEvent(evs, "RelayFunction"); err == nil {
		t.Error("FindSQSEvent of a function without an SQS event: got nil error")
	}
}

func TestQueuesRefusesARedrivePolicyItCannotFollow(t *testing.T) {
	for name, policy := range map[string]string{
		"no GetAtt":           "deadLetterTargetArn: arn:aws:sqs:us-east-1:123456789012:dlq\n        maxReceiveCount: 3",
		"no maxReceiveCount":  "deadLetterTargetArn: !GetAtt DLQ.Arn",
		"GetAtt of something": "deadLetterTargetArn: !GetAtt DLQ.QueueName\n        maxReceiveCount: 3",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "template.yaml")
			tpl := "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      RedrivePolicy:\n        " + policy + "\n"
			if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
				t.Fatal(err)
			}
			if qs, err := samtemplate.Queues(path); err == nil {
				t.Errorf("got %+v; want an error", qs)
			}
		})
	}
}

func TestFunctionsReadsTheProjectTemplate(t *testing.T) {
	fns, err := samtemplate.Functions("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []samtemplate.Function{
		{LogicalID: "LedgerFunction", Timeout: 30, MemorySize: 128, LogFormat: "JSON", ApplicationLogLevel: "INFO", Runtime: "provided.al2023", ArchitectureRef: "Architecture"},
		{LogicalID: "PaymentFunction", Timeout: 60, MemorySize: 256, LogFormat: "JSON", ApplicationLogLevel: "INFO", Runtime: "provided.al2023", ArchitectureRef: "Architecture"},
		{LogicalID: "RelayFunction", Timeout: 30, MemorySize: 128, LogFormat: "JSON", ApplicationLogLevel: "INFO", Runtime: "provided.al2023", ArchitectureRef: "Architecture"},
	}
	if !slices.Equal(fns, want) {
		t.Errorf("got %+v; want %+v", fns, want)
	}
	if _, err := samtemplate.FindFunction(fns, "Nope"); err == nil {
		t.Error("FindFunction of a missing function: got nil error")
	}
}

func TestFunctionsTakeUnsetSettingsFromGlobals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "template.yaml")
	tpl := `Globals:
  Function:
    Timeout: 9
    MemorySize: 512
    Runtime: provided.al2023
    Architectures: [!Ref Arch]
    LoggingConfig:
      LogFormat: JSON
      ApplicationLogLevel: WARN
Resources:
  Named:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: orders-consumer
      Timeout: 20
      Runtime: python3.12
      Architectures: [arm64]
  Computed:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: !Sub "${AWS::StackName}-computed"
      MemorySize: 1024
      LoggingConfig:
        LogFormat: Text
  Table:
    Type: AWS::DynamoDB::Table
`
	if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	fns, err := samtemplate.Functions(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []samtemplate.Function{
		{LogicalID: "Computed", Timeout: 9, MemorySize: 1024, LogFormat: "Text", ApplicationLogLevel: "WARN", Runtime: "provided.al2023", ArchitectureRef: "Arch"},
		{LogicalID: "Named", FunctionName: "orders-consumer", Timeout: 20, MemorySize: 512, LogFormat: "JSON", ApplicationLogLevel: "WARN", Runtime: "python3.12", Architecture: "arm64"},
	}
	if len(fns) != len(want) || fns[0] != want[0] || fns[1] != want[1] {
		t.Errorf("got %+v; want %+v", fns, want)
	}
}

func TestSQSEventsTakeTheTimeoutFromGlobals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "template.yaml")
	tpl := `Globals:
  Function:
    Timeout: 9
Resources:
  Q:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        B:
          Type: SQS
          Properties:
            Queue: !GetAtt Q.Arn
        A:
          Type: SQS
          Properties:
            Queue: !GetAtt Q.Arn
            BatchSize: 3
            FunctionResponseTypes: [ReportBatchItemFailures]
        Api:
          Type: Api
`
	if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, err := samtemplate.SQSEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []samtemplate.SQSEvent{
		{Function: "Fn", Name: "A", Queue: "Q", BatchSize: 3, ReportBatchItemFailures: true, Timeout: 9},
		{Function: "Fn", Name: "B", Queue: "Q", Timeout: 9},
	}
	if len(evs) != len(want) || evs[0] != want[0] || evs[1] != want[1] {
		t.Errorf("got %+v; want %+v", evs, want)
	}
}

// The relay's stream event carries its FilterCriteria; the queue events
// have none.
func TestEventFiltersReadsTheProjectTemplate(t *testing.T) {
	fs, err := samtemplate.EventFilters("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%s/%s %s %d", f.Function, f.Name, f.Type, len(f.Patterns)))
	}
	want := []string{"LedgerFunction/PaymentEvents SQS 0", "PaymentFunction/PaymentQueueEvent SQS 0", "RelayFunction/PaymentsStream DynamoDB 1"}
	if !slices.Equal(got, want) {
		t.Errorf("event filters %q; want %q", got, want)
	}
	if p := fs[2].Patterns[0]; !strings.Contains(p, `"record_status"`) || !strings.Contains(p, `"COMPLETED"`) {
		t.Errorf("relay's pattern %s; want the completed records", p)
	}
}
