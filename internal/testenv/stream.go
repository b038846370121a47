package testenv

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// StreamTable creates an on-demand table named Name(tb) plus suffix, keyed
// by the string attributes keys (a partition key, then a sort key if
// given), with a stream of new images, and returns its name and its
// stream's ARN.
func StreamTable(tb testing.TB, client *dynamodb.Client, suffix string, keys ...string) (table, streamARN string) {
	tb.Helper()
	if len(keys) == 0 || len(keys) > 2 {
		tb.Fatalf("testenv: StreamTable wants a partition key and at most a sort key, got %q", keys)
	}
	in := &dynamodb.CreateTableInput{
		TableName:           aws.String(Name(tb) + suffix),
		BillingMode:         types.BillingModePayPerRequest,
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage},
	}
	for i, k := range keys {
		kind := types.KeyTypeHash
		if i == 1 {
			kind = types.KeyTypeRange
		}
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(k), KeyType: kind})
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(k), AttributeType: types.ScalarAttributeTypeS})
	}
	desc := CreateTable(tb, client, in)
	return aws.ToString(desc.TableName), aws.ToString(desc.LatestStreamArn)
}

// CreateTable creates the table that in describes, whose name must be the
// test's alone (from Name), and returns its description. It fails tb if
// the table cannot be created.
func CreateTable(tb testing.TB, client *dynamodb.Client, in *dynamodb.CreateTableInput) *types.TableDescription {
	tb.Helper()
	out, err := client.CreateTable(tb.Context(), in)
	if inUse := (*types.ResourceInUseException)(nil); errors.As(err, &inUse) {
		// The name is this test's alone, so the table is the one an
		// earlier attempt of this call created before its answer was lost
		// (the client retried it): take it.
		desc, derr := client.DescribeTable(tb.Context(), &dynamodb.DescribeTableInput{TableName: in.TableName})
		if derr != nil {
			tb.Fatalf("testenv: create table %s: %v, and then: %v", aws.ToString(in.TableName), err, derr)
		}
		return desc.Table
	}
	if err != nil {
		tb.Fatalf("testenv: create table %s: %v", aws.ToString(in.TableName), err)
	}
	return out.TableDescription
}
