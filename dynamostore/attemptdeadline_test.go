package dynamostore_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// slowAfterError is a Deserialize middleware, outermost in its step, that
// holds an error answer for d after it was read and deserialised: a slow
// (CPU-throttled) Lambda finishing its work on an answer that arrived in
// time.
func slowAfterError(d time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("testSlowAfterError",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleDeserialize(ctx, in)
				if err != nil {
					time.Sleep(d)
				}
				return out, md, err
			}), middleware.Before)
	}
}

// A conditional-check failure whose answer was read within the attempt's
// time is DynamoDB's answer, not a timeout: it must not be retried.
func TestAttemptDeadlineKeepsAConditionalCheckFailureReadInTime(t *testing.T) {
	f := setup(t)
	proxy := testenv.NewProxy(t, local(t).URL)
	proxy.Answer("PutItem", -1, http.StatusBadRequest, testenv.DynamoDBError("ConditionalCheckFailedException", "The conditional request failed"))
	client := dynamodb.NewFromConfig(local(t).Config(), dynamostore.WithLambdaDefaults(quickBackoff, func(c *dynamostore.ClientOptions) {
		c.AttemptTimeout = 200 * time.Millisecond
		c.MaxAttempts = 3
	}), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL)
		o.APIOptions = append(o.APIOptions, slowAfterError(300*time.Millisecond))
	})
	_, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName:           aws.String(f.table),
		Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "ccf"}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	t.Logf("PutItem: %v", err)
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Errorf("got %v; want a ConditionalCheckFailedException", err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Errorf("got a timeout error (%v); want the conditional-check failure as it is", err)
	}
	if got := proxy.Count("PutItem"); got != 1 {
		t.Errorf("got %d PutItem attempts; want 1 (a conditional-check failure is not retried)", got)
	}
}

// WithLambdaDefaults given again as a per-call option (to change a bound
// for one call) must still make the call.
func TestAttemptDeadlineWithLambdaDefaultsPerCall(t *testing.T) {
	f := setup(t)
	client := dynamodb.NewFromConfig(local(t).Config(), dynamostore.WithLambdaDefaults(quickBackoff))
	_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(f.table),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "per-call"}},
	}, dynamostore.WithLambdaDefaults(func(c *dynamostore.ClientOptions) { c.AttemptTimeout = time.Second }))
	if err != nil {
		t.Errorf("PutItem with WithLambdaDefaults per call: %v", err)
	}
}
