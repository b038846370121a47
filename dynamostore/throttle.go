package dynamostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// throttleCodes are the error codes with which DynamoDB refuses a request
// for lack of capacity: provisioned throughput used up, an on-demand table
// or index still scaling, or the account's request rate limit.
var throttleCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
}

// transactionThrottleCodes are the cancellation reasons of a transaction
// item that DynamoDB could not write for lack of capacity.
var transactionThrottleCodes = map[string]bool{
	"ThrottlingError":               true,
	"ProvisionedThroughputExceeded": true,
}

// throttled reports whether err, from the SDK, means DynamoDB throttled the
// request: one of throttleCodes, or a cancelled transaction whose items
// were all either throttled or fine. A transaction cancelled for another
// reason too (a failed condition, say) is not throttled: retrying it would
// not help, and its real reason must not be hidden.
func throttled(err error) bool {
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		throttle := false
		for _, r := range canceled.CancellationReasons {
			switch code := aws.ToString(r.Code); {
			case transactionThrottleCodes[code]:
				throttle = true
			case code != "" && code != "None":
				return false
			}
		}
		return throttle
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && throttleCodes[apiErr.ErrorCode()]
}

// retryThrottledTransaction tells the SDK's retryer to retry a transaction
// that was cancelled only for throttling: nothing of it was written, and
// the SDK reuses its ClientRequestToken, so the retry cannot apply it
// twice. The SDK retries the other throttling errors by itself.
func retryThrottledTransaction(err error) aws.Ternary {
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) && throttled(err) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// boundary is the client a Store talks through: the given one, with its
// throttling errors marked as lambdakit.ErrThrottled. The SDK error stays
// in the chain, for errors.As.
type boundary struct {
	api API
}

func mark(err error) error {
	if err != nil && throttled(err) {
		return fmt.Errorf("%w: %w", lambdakit.ErrThrottled, err)
	}
	return err
}

func (b boundary) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := b.api.PutItem(ctx, in, optFns...)
	return out, mark(err)
}

func (b boundary) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := b.api.UpdateItem(ctx, in, optFns...)
	return out, mark(err)
}

func (b boundary) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := b.api.DeleteItem(ctx, in, optFns...)
	return out, mark(err)
}

func (b boundary) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := b.api.TransactWriteItems(ctx, in, optFns...)
	return out, mark(err)
}

func (b boundary) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	out, err := b.api.BatchGetItem(ctx, in, optFns...)
	return out, mark(err)
}
