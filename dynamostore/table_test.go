package dynamostore_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

func TestCreateTable(t *testing.T) {
	t.Run("twice is fine and TTL is on", func(t *testing.T) {
		db := local(t).Client()
		table := testenv.Name(t)
		for i := range 2 {
			if err := dynamostore.CreateTable(t.Context(), db, table); err != nil {
				t.Fatalf("CreateTable, call %d: %v", i+1, err)
			}
		}
		desc, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatalf("DescribeTable: %v", err)
		}
		if got := desc.Table.TableStatus; got != types.TableStatusActive {
			t.Errorf("status = %s; want ACTIVE", got)
		}
		ks := desc.Table.KeySchema
		if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "id" || ks[0].KeyType != types.KeyTypeHash {
			t.Errorf("key schema = %+v; want a partition key id only", ks)
		}
		if bm := desc.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("billing mode = %+v; want PAY_PER_REQUEST", bm)
		}
		ttl, err := db.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatalf("DescribeTimeToLive: %v", err)
		}
		d := ttl.TimeToLiveDescription
		if d.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "expiration" {
			t.Errorf("TTL = %s on %q; want ENABLED on %q", d.TimeToLiveStatus, aws.ToString(d.AttributeName), "expiration")
		}
	})

	t.Run("existing table with another key is an error", func(t *testing.T) {
		db := local(t).Client()
		table := testenv.Name(t)
		_, err := db.CreateTable(t.Context(), &dynamodb.CreateTableInput{
			TableName:   aws.String(table),
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		})
		if err != nil {
			t.Fatalf("CreateTable (SDK): %v", err)
		}
		err = dynamostore.CreateTable(t.Context(), db, table)
		if err == nil || !strings.Contains(err.Error(), "key schema") {
			t.Errorf("CreateTable over a table keyed on pk: error %v; want a key schema error", err)
		}
	})

	t.Run("composite key, Powertools' layout", func(t *testing.T) {
		db := local(t).Client()
		table := testenv.Name(t)
		layout := func(o *dynamostore.Options) { o.SortKeyAttr = "sk" }
		for i := range 2 {
			if err := dynamostore.CreateTable(t.Context(), db, table, layout); err != nil {
				t.Fatalf("CreateTable, call %d: %v", i+1, err)
			}
		}
		desc, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatalf("DescribeTable: %v", err)
		}
		ks := desc.Table.KeySchema
		if len(ks) != 2 || aws.ToString(ks[0].AttributeName) != "id" || ks[0].KeyType != types.KeyTypeHash ||
			aws.ToString(ks[1].AttributeName) != "sk" || ks[1].KeyType != types.KeyTypeRange {
			t.Errorf("key schema = %+v; want partition key id, sort key sk", ks)
		}
		// Either layout refuses a table in the other: every Acquire would fail.
		if err := dynamostore.CreateTable(t.Context(), db, table); err == nil || !strings.Contains(err.Error(), "key schema") {
			t.Errorf("CreateTable without a sort key over it: error %v; want a key schema error", err)
		}
	})

	t.Run("TTL on another attribute is an error", func(t *testing.T) {
		db := local(t).Client()
		table := testenv.Name(t)
		if err := dynamostore.CreateTable(t.Context(), db, table); err != nil {
			t.Fatalf("CreateTable: %v", err)
		}
		err := dynamostore.CreateTable(t.Context(), db, table, func(o *dynamostore.Options) { o.ExpirationAttr = "ttl" })
		if err == nil || !strings.Contains(err.Error(), `"expiration"`) {
			t.Errorf("CreateTable with TTL wanted on ttl: error %v; want one naming the current TTL attribute", err)
		}
	})
}
