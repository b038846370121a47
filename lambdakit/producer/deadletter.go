package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// MessageSender is the part of *sqs.Client that DeadLetterQueue calls.
type MessageSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ MessageSender = (*sqs.Client)(nil)

// ErrNotDeadLettered means DeadLetterQueue could not send a message as it
// is: it has no message ID, or lacks the message group a FIFO queue needs.
var ErrNotDeadLettered = errors.New("producer: message cannot be sent to the dead-letter queue")

// DeadLetterQueue sends messages that failed permanently to an SQS queue:
// it is the lambdakit.DeadLetterSender of BatchOptions.DeadLetters. It needs
// sqs:SendMessage on that queue, and nothing else.
//
// The message goes as it was received: the body byte for byte, every message
// attribute, and the AWSTraceHeader system attribute if it had one. On a
// FIFO queue (URL ending in ".fifo") it keeps its MessageGroupId, and its
// MessageDeduplicationId is DedupID of its SQS message ID. The message ID
// stays the same across redeliveries of one message, so a message sent twice
// (its send succeeded, but the record came back anyway) is dropped by SQS as
// a duplicate within the 5-minute window; and no two distinct messages share
// a deduplication ID, so that a message redriven and failing again, or
// another message with the same idempotency key, is never dropped as a
// duplicate of an earlier dead letter. (A dedup ID from the idempotency key
// would do exactly that, and the message would be deleted from its queue
// though the dead-letter queue did not keep it.) SQS does the same when it
// moves a message from a FIFO queue to its FIFO dead-letter queue itself:
// it replaces the deduplication ID with the message ID; and a message
// redriven from a dead-letter queue gets a new message ID.
//
// The reason is not added to the message, whose attributes stay as they
// were (a redrive sends them back): the batch adapter logs it with the
// message ID.
type DeadLetterQueue struct {
	client   MessageSender
	queueURL string
	fifo     bool
}

var _ lambdakit.DeadLetterSender = (*DeadLetterQueue)(nil)

// NewDeadLetterQueue returns a DeadLetterQueue that sends to the queue at
// queueURL through client. It makes no call.
func NewDeadLetterQueue(client MessageSender, queueURL string) *DeadLetterQueue {
	return &DeadLetterQueue{client: client, queueURL: queueURL, fifo: strings.HasSuffix(queueURL, ".fifo")}
}

// SendDeadLetter implements lambdakit.DeadLetterSender: one SendMessage call
// (the SDK retries it as usual). reason is not sent.
func (q *DeadLetterQueue) SendDeadLetter(ctx context.Context, msg *events.SQSMessage, reason error) error {
	in, err := q.input(msg)
	if err != nil {
		return err
	}
	if _, err := q.client.SendMessage(ctx, in, WithTraceHeader(ctx)); err != nil {
		return fmt.Errorf("producer: sending message %s to the dead-letter queue: %w", msg.MessageId, err)
	}
	return nil
}

// input builds the SendMessage call that sends msg.
func (q *DeadLetterQueue) input(msg *events.SQSMessage) (*sqs.SendMessageInput, error) {
	if msg.MessageId == "" {
		return nil, fmt.Errorf("%w: it has no message ID", ErrNotDeadLettered)
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(q.queueURL),
		MessageBody:       aws.String(msg.Body),
		MessageAttributes: sendAttributes(msg.MessageAttributes),
	}
	if trace := msg.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)]; trace != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(trace)},
		}
	}
	if q.fifo {
		group := msg.Attributes["MessageGroupId"]
		if group == "" {
			return nil, fmt.Errorf("%w: message %s has no MessageGroupId, which the FIFO dead-letter queue needs", ErrNotDeadLettered, msg.MessageId)
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(DedupID(msg.MessageId))
	}
	return in, nil
}

// sendAttributes converts the message attributes of a message as Lambda
// delivers it into those SendMessage takes, so that a message can be sent
// on as it came: the reverse of eventAttributes. It returns nil for none.
func sendAttributes(attrs map[string]events.SQSMessageAttribute) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for name, a := range attrs {
		v := types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue}
		// SQS reserves the list values; Lambda delivers them empty.
		if len(a.StringListValues) > 0 {
			v.StringListValues = a.StringListValues
		}
		if len(a.BinaryListValues) > 0 {
			v.BinaryListValues = a.BinaryListValues
		}
		out[name] = v
	}
	return out
}
