package producer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// VisibilityClient is the part of *sqs.Client that QueueVisibility calls.
type VisibilityClient interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ VisibilityClient = (*sqs.Client)(nil)

// QueueVisibility changes the visibility timeout of messages received from
// one SQS queue: it is the lambdakit.VisibilityChanger of
// lambdakit.Backoff. It needs sqs:ChangeMessageVisibility on that queue
// (the action covers the batch call), and nothing else.
type QueueVisibility struct {
	client   VisibilityClient
	queueURL string
}

var _ lambdakit.VisibilityChanger = (*QueueVisibility)(nil)

// NewQueueVisibility returns a QueueVisibility for the queue at queueURL,
// the function's source queue, through client. It makes no call.
func NewQueueVisibility(client VisibilityClient, queueURL string) *QueueVisibility {
	return &QueueVisibility{client: client, queueURL: queueURL}
}

// EntryRefusedError is SQS's refusal of one entry of a
// ChangeMessageVisibilityBatch call.
type EntryRefusedError struct {
	MessageID   string
	Code        string // SQS's error code, such as ReceiptHandleIsInvalid
	Message     string
	SenderFault bool
}

// Error implements error.
func (e *EntryRefusedError) Error() string {
	return fmt.Sprintf("producer: visibility of message %s not changed: %s: %s", e.MessageID, e.Code, e.Message)
}

// ChangeVisibility implements lambdakit.VisibilityChanger: one
// ChangeMessageVisibilityBatch call for up to 10 changes, each entry's
// timeout in whole seconds. An entry SQS refuses comes back as an
// *EntryRefusedError at its index.
func (q *QueueVisibility) ChangeVisibility(ctx context.Context, changes []lambdakit.VisibilityChange) ([]error, error) {
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.queueURL)}
	for i, c := range changes {
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)), // entry IDs are unique within the call; message IDs may repeat
			ReceiptHandle:     aws.String(c.ReceiptHandle),
			VisibilityTimeout: int32(c.Timeout.Seconds()),
		})
	}
	out, err := q.client.ChangeMessageVisibilityBatch(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("producer: changing the visibility of %d messages: %w", len(changes), err)
	}
	refused := make([]error, len(changes))
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(changes) {
			continue // not an entry of this call
		}
		refused[i] = &EntryRefusedError{MessageID: changes[i].MessageID, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
	}
	return refused, nil
}
