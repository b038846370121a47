package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client that CreateTable uses.
// *dynamodb.Client satisfies it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// CreateTable creates table for a Store with the same Options: billed on
// demand, with the key attribute as its string partition key, and with
// Options.SortKeyAttr that as its string sort key (Powertools'
// composite-key layout). It waits
// until the table is active, polling for as long as ctx allows, then turns
// on TTL on the expiration attribute, so that DynamoDB deletes expired
// records. A table that exists already is fine if its key fits; CreateTable
// still makes sure TTL is on. Like New, it returns an error wrapping
// ErrInvalidConfig for a nil client, an empty name or conflicting Options,
// before sending anything.
func CreateTable(ctx context.Context, client TableAPI, table string, optFns ...func(*Options)) error {
	if client == nil {
		return fmt.Errorf("%w: no client", ErrInvalidConfig)
	}
	if table == "" {
		return fmt.Errorf("%w: no table name", ErrInvalidConfig)
	}
	o, err := newOptions(optFns)
	if err != nil {
		return err
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
	}
	for _, k := range o.keySchema() {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: k.AttributeName, AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, k)
	}
	_, err = client.CreateTable(ctx, in)
	var exists *types.ResourceInUseException
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("dynamostore: create table %s: %w", table, err)
	}
	desc, err := waitActive(ctx, client, table)
	if err != nil {
		return err
	}
	if err := checkKey(desc, o); err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", table, err)
	}
	return enableTTL(ctx, client, table, o.ExpirationAttr)
}

// waitActive polls until table is active, backing off up to a few
// seconds between looks; only ctx bounds the wait.
func waitActive(ctx context.Context, client TableAPI, table string) (*types.TableDescription, error) {
	delay := 100 * time.Millisecond
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return nil, fmt.Errorf("dynamostore: describe table %s: %w", table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return out.Table, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dynamostore: waiting for table %s to become active: %w", table, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// keySchema is the key of a table for Store with o: a string partition
// key, and with SortKeyAttr a string sort key.
func (o Options) keySchema() []types.KeySchemaElement {
	ks := []types.KeySchemaElement{{AttributeName: aws.String(o.KeyAttr), KeyType: types.KeyTypeHash}}
	if o.SortKeyAttr != "" {
		ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(o.SortKeyAttr), KeyType: types.KeyTypeRange})
	}
	return ks
}

// checkKey makes sure an existing table is keyed the way Store writes
// with o: a table keyed otherwise would fail every Acquire.
func checkKey(desc *types.TableDescription, o Options) error {
	want := o.keySchema()
	if keySchemaString(desc.KeySchema) != keySchemaString(want) {
		return fmt.Errorf("key schema is %s; want %s (Options.KeyAttr, Options.SortKeyAttr)", keySchemaString(desc.KeySchema), keySchemaString(want))
	}
	for _, def := range desc.AttributeDefinitions {
		name := aws.ToString(def.AttributeName)
		if (name == o.KeyAttr || name == o.SortKeyAttr) && def.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("key attribute %q is of type %s; want S", name, def.AttributeType)
		}
	}
	return nil
}

func keySchemaString(ks []types.KeySchemaElement) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += " "
		}
		s += aws.ToString(k.AttributeName) + ":" + string(k.KeyType)
	}
	return s + "]"
}

// enableTTL turns TTL on unless it is on already: DynamoDB rejects enabling
// it twice, and allows one change an hour.
func enableTTL(ctx context.Context, client TableAPI, table, attr string) error {
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamostore: describe TTL of table %s: %w", table, err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if got := aws.ToString(d.AttributeName); got != attr {
				return fmt.Errorf("dynamostore: table %s has TTL on %q; want it on %q", table, got, attr)
			}
			return nil
		case types.TimeToLiveStatusDisabling:
			return fmt.Errorf("dynamostore: table %s: TTL is being disabled; enable it on %q once that is done", table, attr)
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attr),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: enable TTL on table %s: %w", table, err)
	}
	return nil
}
