package motoserver_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// An event source mapping on the local stack is configuration only: moto
// 5.2.1's own mappings, which would need Docker to run the function,
// neither receive a queue's messages as they are sent (raising their
// receive count) nor drop a stream's records (the stream read empty after
// every write to a mapped table, the mapping disabled or even deleted).
func TestMappingsLeaveQueuesAndStreamsAlone(t *testing.T) {
	cfg := moto.Config(t)
	ctx := t.Context()
	lc, sqsc, db := lambda.NewFromConfig(cfg), sqs.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	fn := testenv.Function(t, cfg, lambda.CreateFunctionInput{})

	queue := testenv.Queue(t, sqsc, false, nil)
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queue),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	table, streamARN := testenv.StreamTable(t, db, "", "id")
	for _, src := range []string{attrs.Attributes["QueueArn"], streamARN} {
		in := &lambda.CreateEventSourceMappingInput{FunctionName: fn.FunctionArn, EventSourceArn: aws.String(src)}
		if src == streamARN {
			in.StartingPosition = lambdatypes.EventSourcePositionTrimHorizon
		}
		if _, err := lc.CreateEventSourceMapping(ctx, in); err != nil {
			t.Fatal(err)
		}
	}

	for range 3 {
		if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String("m")}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("a message's first receive has ApproximateReceiveCount %s; want 1: nothing else received it", n)
		}
	}

	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "a"}}}); err != nil {
		t.Fatal(err)
	}
	recs, err := ddbstream.Read(ctx, dynamodbstreams.NewFromConfig(cfg), streamARN, cfg.Region)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Errorf("the mapped table's stream holds %d records after a write; want 1", len(recs))
	}
}
