// Package ddbstream reads a DynamoDB stream through DynamoDB Streams and
// gives its records in the shape Lambda delivers them to a function
// (events.DynamoDBEventRecord), for the tests and tools that play a stream
// event source mapping locally.
package ddbstream

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// API is the part of the DynamoDB Streams client Read calls.
type API interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// maxPages bounds the reads of one shard: 10,000 pages of up to 1,000
// records.
const maxPages = 10_000

// Read returns the records of every shard of the stream streamARN, from its
// oldest (TRIM_HORIZON), each shard's in order, shards in the order the
// stream lists them, until each shard has no more records now. region is
// the records' awsRegion.
func Read(ctx context.Context, c API, streamARN, region string) ([]events.DynamoDBEventRecord, error) {
	var shards []types.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(streamARN)}
	for range maxPages {
		out, err := c.DescribeStream(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("describe stream %s: %w", streamARN, err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if out.StreamDescription.LastEvaluatedShardId == nil {
			break
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
	var recs []events.DynamoDBEventRecord
	for _, sh := range shards {
		it, err := c.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(streamARN), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", aws.ToString(sh.ShardId), err)
		}
		iter := it.ShardIterator
		for page := 0; iter != nil; page++ {
			if page == maxPages {
				return nil, fmt.Errorf("shard %s: more than %d pages", aws.ToString(sh.ShardId), maxPages)
			}
			out, err := c.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, fmt.Errorf("shard %s: %w", aws.ToString(sh.ShardId), err)
			}
			for _, r := range out.Records {
				recs = append(recs, Record(r, streamARN, region))
			}
			if len(out.Records) == 0 {
				break // nothing more now; an open shard's iterator never ends
			}
			iter = out.NextShardIterator
		}
	}
	return recs, nil
}

// Record is r as Lambda delivers it.
func Record(r types.Record, streamARN, region string) events.DynamoDBEventRecord {
	rec := events.DynamoDBEventRecord{
		AWSRegion:      region,
		EventID:        aws.ToString(r.EventID),
		EventName:      string(r.EventName),
		EventSource:    aws.ToString(r.EventSource),
		EventVersion:   aws.ToString(r.EventVersion),
		EventSourceArn: streamARN,
	}
	if d := r.Dynamodb; d != nil {
		rec.Change = events.DynamoDBStreamRecord{
			Keys:           image(d.Keys),
			NewImage:       image(d.NewImage),
			OldImage:       image(d.OldImage),
			SequenceNumber: aws.ToString(d.SequenceNumber),
			SizeBytes:      aws.ToInt64(d.SizeBytes),
			StreamViewType: string(d.StreamViewType),
		}
		if t := d.ApproximateCreationDateTime; t != nil {
			rec.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: *t}
		}
	}
	return rec
}

func image(m map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = value(v)
	}
	return out
}

func value(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(image(v.Value))
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = value(e)
		}
		return events.NewListAttribute(l)
	}
	return events.NewNullAttribute()
}
