package awsrules_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The rules' cases are also sent to a moto_server, through the SDK's
// clients, where moto enforces the rule: a case where the rule and moto
// disagree is a mistake in one of them. Where moto 5.2.1 does not enforce
// a rule (or a clause of one), the case stands on AWS's documentation
// alone, and its table says so (moto: false):
//   - DynamoDB numbers: the 38 significant digits, and magnitudes from
//     1E+126 up to where moto's own overflow starts;
//   - DynamoDB: the 4 KB expression length and the 4 MB of a transaction;
//   - DynamoDB number sets: members of one value, and members that are
//     not numbers DynamoDB holds (moto refuses an empty set only);
//   - SQS: the characters and length of message group and deduplication
//     IDs; the reserved prefixes, periods and length of attribute names
//     (moto checks their characters only); the characters of bodies and
//     attribute values; the values of Number attributes; the 10
//     attributes of a message.
var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// ctxFor bounds a test's requests.
func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sqsClient returns a client for the package's moto_server.
func sqsClient(t *testing.T) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(moto.Config(t))
}

// dynamoTable returns a client for moto and a new table keyed by the
// string "pk" (and the string "sk", when sorted).
func dynamoTable(t *testing.T, sorted bool) (*dynamodb.Client, string) {
	t.Helper()
	client := dynamodb.NewFromConfig(moto.Config(t))
	name := testenv.Name(t)
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
	}
	if sorted {
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange})
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS})
	}
	testenv.CreateTable(t, client, in)
	return client, name
}

// agree fails t when the rule's verdict (ruleErr) and moto's (motoErr)
// differ.
func agree(t *testing.T, what string, ruleErr, motoErr error) {
	t.Helper()
	if (ruleErr == nil) != (motoErr == nil) {
		t.Errorf("%s: the rule says %v; moto says %v; want the same verdict", what, ruleErr, motoErr)
	}
}

// verdict fails t unless a rule's err says ok (nil), or refused with
// sentinel.
func verdict(t *testing.T, call string, err error, ok bool, sentinel error) {
	t.Helper()
	if (err == nil) != ok || err != nil && !errors.Is(err, sentinel) {
		t.Fatalf("%s = %v; want ok=%v, or an error wrapping %v", call, err, ok, sentinel)
	}
}

// crossCheck checks one clause: the rule's verdict err, and, where moto
// enforces the clause, that moto's answer to send agrees.
func crossCheck(t *testing.T, call string, err error, ok bool, sentinel error, moto bool, send func(context.Context) error) {
	t.Helper()
	verdict(t, call, err, ok, sentinel)
	if moto {
		agree(t, call, err, send(ctxFor(t)))
	}
}

// putValue returns a send for crossCheck: a PutItem, to table, of the item
// keyed pk that holds v.
func putValue(client *dynamodb.Client, table, pk string, v types.AttributeValue) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk},
			"v":  v,
		}})
		return err
	}
}
