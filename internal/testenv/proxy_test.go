package testenv_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

func TestProxyForwardsAndAnswersChosenRequests(t *testing.T) {
	proxy := testenv.NewProxy(t, moto.Server(t).URL)
	// One attempt per call, so that the proxy sees exactly the calls.
	client := dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL)
		o.RetryMaxAttempts = 1
	})
	proxy.Answer("ListTables", 1, http.StatusBadRequest, testenv.DynamoDBError("ThrottlingException", "slow down"))

	_, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	if throttled := (*types.ThrottlingException)(nil); !errors.As(err, &throttled) {
		t.Errorf("first ListTables: got %v; want the proxy's ThrottlingException", err)
	}
	if _, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Errorf("second ListTables: got %v; want moto's answer", err)
	}
	if got := proxy.Count("ListTables"); got != 2 {
		t.Errorf("Count(ListTables) = %d; want 2", got)
	}

	proxy.Answer("DescribeTable", -1, http.StatusBadRequest, testenv.DynamoDBTransactionCanceled("None", "ThrottlingError"))
	for range 2 {
		_, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String("any")})
		canceled := (*types.TransactionCanceledException)(nil)
		if !errors.As(err, &canceled) || len(canceled.CancellationReasons) != 2 || aws.ToString(canceled.CancellationReasons[1].Code) != "ThrottlingError" {
			t.Errorf("DescribeTable: got %v; want a TransactionCanceledException with reasons [None ThrottlingError]", err)
		}
	}

	proxy.Reset()
	if got := proxy.Count("ListTables"); got != 0 {
		t.Errorf("Count after Reset = %d; want 0", got)
	}
}

func TestProxyHangsUntilTheClientGivesUp(t *testing.T) {
	proxy := testenv.NewProxy(t, moto.Server(t).URL)
	client := dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL)
		o.RetryMaxAttempts = 1
	})
	proxy.Hang("ListTables", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung ListTables: got %v; want context.DeadlineExceeded", err)
	}
	if _, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Errorf("next ListTables: got %v; want moto's answer", err)
	}
}

func TestProxyLosesTheAnswerOfARequestThatTookEffect(t *testing.T) {
	proxy := testenv.NewProxy(t, moto.Server(t).URL)
	client := dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL)
		o.RetryMaxAttempts = 1
	})
	name := testenv.Name(t)
	proxy.LoseAnswer("CreateTable", 1, http.StatusInternalServerError, testenv.DynamoDBError("InternalServerError", "answer lost"))
	_, err := client.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err == nil {
		t.Fatal("CreateTable: got success; want the proxy's error")
	}
	if _, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}); err != nil {
		t.Errorf("DescribeTable: %v; want the table created though its answer was lost", err)
	}
}

// A create whose answer is lost is retried by the client and finds its own
// resource: StreamTable and KinesisStream take it rather than fail the test
// (a fresh-clone CI failed on "Table already exists" so).
func TestCreatorsTakeWhatTheirLostAnswerCreated(t *testing.T) {
	proxy := testenv.NewProxy(t, moto.Server(t).URL)
	cfg := moto.Config(t)
	cfg.BaseEndpoint = aws.String(proxy.URL)

	t.Run("StreamTable", func(t *testing.T) {
		proxy.LoseAnswer("CreateTable", 1, http.StatusInternalServerError, testenv.DynamoDBError("InternalServerError", "answer lost"))
		table, arn := testenv.StreamTable(t, dynamodb.NewFromConfig(cfg), "", "id")
		if got := proxy.Count("CreateTable"); got != 2 {
			t.Errorf("CreateTable calls = %d; want 2, the lost one and its retry", got)
		}
		if table == "" || arn == "" {
			t.Errorf("StreamTable = %q, %q; want the table and its stream", table, arn)
		}
	})
	t.Run("KinesisStream", func(t *testing.T) {
		proxy.LoseAnswer("CreateStream", 1, http.StatusInternalServerError, testenv.DynamoDBError("InternalFailure", "answer lost"))
		arn := testenv.KinesisStream(t, kinesis.NewFromConfig(cfg), 1)
		if got := proxy.Count("CreateStream"); got != 2 {
			t.Errorf("CreateStream calls = %d; want 2, the lost one and its retry", got)
		}
		if arn == "" {
			t.Error("KinesisStream returned no ARN")
		}
	})
}
