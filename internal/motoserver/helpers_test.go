package motoserver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// moto is the package's moto_server, started once by TestMain.
var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// createTable creates a table of its own for the test: key id, or pk and
// sk when sortKey; with a stream of new and old images when stream.
func createTable(t *testing.T, db *dynamodb.Client, sortKey, stream bool) string {
	t.Helper()
	name := testenv.Name(t)
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
	}
	if sortKey {
		in.AttributeDefinitions = []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		}
		in.KeySchema = []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		}
	} else {
		in.AttributeDefinitions = []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}}
		in.KeySchema = []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}
	}
	if stream {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}
	}
	// The name is this test's alone: a table that already exists is the
	// one an attempt of this call made, whose answer the SDK gave up on
	// and retried (a CI run on a busy machine saw it).
	var inUse *types.ResourceInUseException
	if _, err := db.CreateTable(context.Background(), in); err != nil && !errors.As(err, &inUse) {
		t.Fatalf("CreateTable: %v", err)
	}
	return name
}
