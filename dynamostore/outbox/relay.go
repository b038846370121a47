package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// ErrBadItem means a stream record of the outbox table is no outbox item
// the relay can send (a field missing, or not a string). Retrying cannot
// mend it: the mapping's MaximumRetryAttempts and on-failure destination
// take it out of the way.
var ErrBadItem = errors.New("outbox: not an outbox item")

// Relay returns the handler of the outbox table's stream: for each new
// item (an INSERT; the writes a retried completion repeats are MODIFY, and
// TTL deletions are REMOVE, both skipped) it sends the message to its
// queue, with its group and, on a FIFO queue, the item's deduplication ID,
// and IDAttribute. Records run in order, and the first that fails ends the
// batch: see lambdakit.DynamoDBStreamBatch, which takes optFns.
//
// Its event source mapping needs FunctionResponseTypes
// [ReportBatchItemFailures], StartingPosition TRIM_HORIZON (so that no item
// written before the mapping is missed), and, so that a failure is never
// silent, MaximumRetryAttempts, BisectBatchOnFunctionError and an
// on-failure destination.
func Relay(client producer.MessageSender, optFns ...func(*lambdakit.StreamOptions)) lambdakit.DynamoDBStreamBatchFunc {
	return lambdakit.DynamoDBStreamBatch(func(ctx context.Context, rec *events.DynamoDBEventRecord) error {
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
			return nil
		}
		in, err := sendInput(rec.Change.NewImage)
		if err != nil {
			return err
		}
		if _, err := client.SendMessage(ctx, in); err != nil {
			return fmt.Errorf("outbox: send %s to %s: %w", aws.ToString(in.MessageAttributes[IDAttribute].StringValue), aws.ToString(in.QueueUrl), err)
		}
		return nil
	}, optFns...)
}

// sendInput is the SendMessage call for an outbox item's new image.
func sendInput(img map[string]events.DynamoDBAttributeValue) (*sqs.SendMessageInput, error) {
	str := func(name string, required bool) (string, error) {
		v, ok := img[name]
		switch {
		case !ok && !required:
			return "", nil
		case !ok:
			return "", fmt.Errorf("%w: no %s", ErrBadItem, name)
		case v.DataType() != events.DataTypeString:
			return "", fmt.Errorf("%w: %s is not a string", ErrBadItem, name)
		}
		return v.String(), nil
	}
	var id, queue, body, group, dedup string
	var err error
	for _, f := range []struct {
		dst      *string
		name     string
		required bool
	}{{&id, "id", true}, {&queue, "queueUrl", true}, {&body, "body", true}, {&group, "groupId", false}, {&dedup, "dedupId", true}} {
		if *f.dst, err = str(f.name, f.required); err != nil {
			return nil, err
		}
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(queue),
		MessageBody:       aws.String(body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{IDAttribute: {DataType: aws.String("String"), StringValue: aws.String(id)}},
	}
	if group != "" {
		in.MessageGroupId = aws.String(group)
	}
	if strings.HasSuffix(queue, ".fifo") {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	if a, ok := img["attributes"]; ok {
		if a.DataType() != events.DataTypeMap {
			return nil, fmt.Errorf("%w: attributes is not a map", ErrBadItem)
		}
		for k, v := range a.Map() {
			if v.DataType() != events.DataTypeString {
				return nil, fmt.Errorf("%w: attribute %s is not a string", ErrBadItem, k)
			}
			in.MessageAttributes[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v.String())}
		}
	}
	return in, nil
}
