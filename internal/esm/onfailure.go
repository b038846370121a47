package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// An on-failure destination of a stream's mapping: when a batch is
// discarded, Lambda sends an invocation record that says where the records
// are (not the records themselves), as documented with an example for each
// kind of stream in
// https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html
// and https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html.
// Only an SQS queue is played (Lambda also takes an SNS topic, and S3 for
// Kafka sources).

// SQSSender is the part of the SQS API an on-failure destination calls.
// *sqs.Client implements it.
type SQSSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// SQSDestination is a queue that gets a stream mapping's invocation
// records.
type SQSDestination struct {
	Client   SQSSender
	QueueURL string
}

// ErrDestination means an invocation record could not be sent.
var ErrDestination = errors.New("esm: the on-failure destination cannot take the invocation record")

// send sends rec and returns the message's ID.
func (d *SQSDestination) send(ctx context.Context, rec InvocationRecord) (string, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	out, err := d.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(d.QueueURL), MessageBody: aws.String(string(body))})
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrDestination, d.QueueURL, err)
	}
	return aws.ToString(out.MessageId), nil
}

// InvocationRecord is what Lambda sends to a stream mapping's on-failure
// destination. Exactly one of the batch infos is set, by the kind of
// stream.
type InvocationRecord struct {
	RequestContext     RequestContext   `json:"requestContext"`
	ResponseContext    ResponseContext  `json:"responseContext"`
	Version            string           `json:"version"`
	Timestamp          string           `json:"timestamp"`
	DDBStreamBatchInfo *StreamBatchInfo `json:"DDBStreamBatchInfo,omitempty"`
	KinesisBatchInfo   *StreamBatchInfo `json:"KinesisBatchInfo,omitempty"`
}

// RequestContext is an invocation record's account of the last invocation.
type RequestContext struct {
	RequestID   string `json:"requestId"`
	FunctionARN string `json:"functionArn"`
	// Condition is always RetryAttemptsExhausted here: records are not
	// aged out (MaximumRecordAgeInSeconds is not played).
	Condition string `json:"condition"`
	// ApproximateInvokeCount counts the deliveries of the discarded
	// batch's first record toward MaximumRetryAttempts: 1 plus its
	// retries. Deliveries in a larger batch that was split do not count,
	// as splits consume no retries.
	ApproximateInvokeCount int `json:"approximateInvokeCount"`
}

// ResponseContext is an invocation record's account of the function's
// last answer.
type ResponseContext struct {
	StatusCode      int    `json:"statusCode"`
	ExecutedVersion string `json:"executedVersion"`
	// FunctionError is "Unhandled" after a function error, a crash, a
	// timeout or an init error, as Lambda's Invoke reports them all. After
	// a partial batch response the invocation succeeded, and AWS does not
	// document a value: the field is left out.
	FunctionError string `json:"functionError,omitempty"`
}

// StreamBatchInfo says where the discarded records are in the stream.
type StreamBatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamARN                       string `json:"streamArn"`
}

// invocationRecord describes recs, discarded from sh after res.
func (m *StreamMapping) invocationRecord(sh *shardState, res runtimeapi.Result, recs []StreamRecord) InvocationRecord {
	rec := InvocationRecord{
		RequestContext: RequestContext{
			RequestID:              res.RequestID,
			FunctionARN:            m.opts.FunctionARN,
			Condition:              "RetryAttemptsExhausted",
			ApproximateInvokeCount: sh.attempts,
		},
		// Lambda invokes the unqualified function: $LATEST.
		ResponseContext: ResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST"},
		Version:         "1.0",
		Timestamp:       time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
	}
	if res.Outcome != runtimeapi.OutcomeSuccess {
		rec.ResponseContext.FunctionError = "Unhandled"
	}
	m.src.batchInfo(&rec, sh.id, recs)
	return rec
}
