package esm

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/kinesisstream"
)

// streamSource is what a StreamMapping reads: the one part of the mapping
// that differs between DynamoDB Streams and Kinesis.
type streamSource interface {
	// shards lists the stream's shards, in the order the stream does.
	shards(ctx context.Context) ([]shardInfo, error)
	// read returns up to limit records of shard from pos, as Lambda
	// delivers them; none when the shard has nothing past pos now.
	read(ctx context.Context, shard string, pos position, limit int) ([]StreamRecord, error)
	// batchInfo puts the description of recs, discarded from shard, in
	// rec under the name Lambda gives it for this kind of stream.
	batchInfo(rec *InvocationRecord, shard string, recs []StreamRecord)
}

// shardInfo is a shard as the stream lists it: its parents (one after a
// split, two after a Kinesis merge; none for a shard the stream started
// with), and whether it is closed, so that it will get no more records.
type shardInfo struct {
	id      string
	parents []string
	closed  bool
}

// position is where a shard is read from: after a sequence number, at one
// (a retry), or, with neither, from the oldest record (StartingPosition
// TRIM_HORIZON, which an outbox's relay needs; LATEST is not played).
type position struct {
	after string
	at    string
}

// iterator returns the shard iterator type that reads from p, by the name
// DynamoDB Streams and Kinesis share, and its sequence number if it has one.
func (p position) iterator() (string, *string) {
	switch {
	case p.at != "":
		return "AT_SEQUENCE_NUMBER", aws.String(p.at)
	case p.after != "":
		return "AFTER_SEQUENCE_NUMBER", aws.String(p.after)
	}
	return "TRIM_HORIZON", nil
}

// newShardInfo describes the shard id; parents may hold nils, for the
// parents it does not have.
func newShardInfo(id *string, closed bool, parents ...*string) shardInfo {
	info := shardInfo{id: aws.ToString(id), closed: closed}
	for _, p := range parents {
		if p != nil {
			info.parents = append(info.parents, *p)
		}
	}
	return info
}

// maxListPages bounds the pages of a stream's shard list.
const maxListPages = 1000

// ddbSource is a DynamoDB stream, read through DynamoDB Streams.
type ddbSource struct {
	client ddbstream.API
	arn    string
	region string
}

func (s *ddbSource) shards(ctx context.Context) ([]shardInfo, error) {
	var list []shardInfo
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(s.arn)}
	for range maxListPages {
		out, err := s.client.DescribeStream(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("%w: describe %s: %w", ErrStream, s.arn, err)
		}
		for _, sh := range out.StreamDescription.Shards {
			list = append(list, newShardInfo(sh.ShardId, sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil, sh.ParentShardId))
		}
		if out.StreamDescription.LastEvaluatedShardId == nil {
			break
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
	return list, nil
}

func (s *ddbSource) read(ctx context.Context, shard string, pos position, limit int) ([]StreamRecord, error) {
	typ, seq := pos.iterator()
	it, err := s.client.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(s.arn), ShardId: aws.String(shard), ShardIteratorType: ddbtypes.ShardIteratorType(typ), SequenceNumber: seq,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, shard, err)
	}
	out, err := s.client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, shard, err)
	}
	recs := make([]StreamRecord, 0, len(out.Records))
	for _, r := range out.Records {
		rec := ddbstream.Record(r, s.arn, s.region)
		recs = append(recs, StreamRecord{DynamoDBEventRecord: &rec})
	}
	return recs, nil
}

func (s *ddbSource) batchInfo(rec *InvocationRecord, shard string, recs []StreamRecord) {
	// DynamoDB's creation times are whole seconds, and Lambda's example
	// record writes them so.
	rec.DDBStreamBatchInfo = newBatchInfo(s.arn, shard, recs, "2006-01-02T15:04:05Z")
}

// kinesisSource is a Kinesis data stream, read with shard iterators (a
// shared-throughput consumer; enhanced fan-out is not played).
type kinesisSource struct {
	client   kinesisstream.API
	arn      string
	region   string
	identity string // invokeIdentityArn
}

// maxEmptyPages bounds how many empty pages one read follows: Kinesis may
// answer GetRecords with no records and a next iterator while the shard
// has records further on (MillisBehindLatest above zero).
const maxEmptyPages = 10

func (s *kinesisSource) shards(ctx context.Context) ([]shardInfo, error) {
	var list []shardInfo
	in := &kinesis.ListShardsInput{StreamARN: aws.String(s.arn)}
	for range maxListPages {
		out, err := s.client.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("%w: list the shards of %s: %w", ErrStream, s.arn, err)
		}
		for _, sh := range out.Shards {
			list = append(list, newShardInfo(sh.ShardId, sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil, sh.ParentShardId, sh.AdjacentParentShardId))
		}
		if out.NextToken == nil {
			break
		}
		// Kinesis takes the token alone: with the stream named too, it
		// refuses the call.
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	return list, nil
}

func (s *kinesisSource) read(ctx context.Context, shard string, pos position, limit int) ([]StreamRecord, error) {
	typ, seq := pos.iterator()
	it, err := s.client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamARN: aws.String(s.arn), ShardId: aws.String(shard), ShardIteratorType: kintypes.ShardIteratorType(typ), StartingSequenceNumber: seq,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, shard, err)
	}
	iter := it.ShardIterator
	for range maxEmptyPages {
		out, err := s.client.GetRecords(ctx, &kinesis.GetRecordsInput{StreamARN: aws.String(s.arn), ShardIterator: iter, Limit: aws.Int32(int32(limit))})
		if err != nil {
			return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, shard, err)
		}
		if len(out.Records) > 0 {
			recs := make([]StreamRecord, len(out.Records))
			for i, r := range out.Records {
				rec := kinesisstream.Record(r, s.arn, shard, s.region, s.identity)
				recs[i] = StreamRecord{KinesisEventRecord: &rec}
			}
			return recs, nil
		}
		// A closed shard has no next iterator, and a shard with
		// nothing further now is not behind.
		if out.NextShardIterator == nil || aws.ToInt64(out.MillisBehindLatest) == 0 {
			break
		}
		iter = out.NextShardIterator
	}
	return nil, nil
}

func (s *kinesisSource) batchInfo(rec *InvocationRecord, shard string, recs []StreamRecord) {
	rec.KinesisBatchInfo = newBatchInfo(s.arn, shard, recs, "2006-01-02T15:04:05.000Z")
}

// newBatchInfo describes recs, consecutive records of shard, with times in
// layout.
func newBatchInfo(streamARN, shard string, recs []StreamRecord, layout string) *StreamBatchInfo {
	first, last := recs[0], recs[len(recs)-1]
	return &StreamBatchInfo{
		ShardID:                         shard,
		StartSequenceNumber:             first.SequenceNumber(),
		EndSequenceNumber:               last.SequenceNumber(),
		ApproximateArrivalOfFirstRecord: first.arrival().UTC().Format(layout),
		ApproximateArrivalOfLastRecord:  last.arrival().UTC().Format(layout),
		BatchSize:                       len(recs),
		StreamARN:                       streamARN,
	}
}
