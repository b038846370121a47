// Package kinesisstream gives the records of a Kinesis data stream in the
// shape Lambda delivers them to a function (events.KinesisEventRecord), for
// the tools and tests that play a Kinesis event source mapping locally. It
// is internal/ddbstream's counterpart for Kinesis.
package kinesisstream

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// API is the part of the Kinesis client a mapping calls. *kinesis.Client
// implements it.
type API interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

// The constant fields of every record Lambda delivers from Kinesis.
const (
	EventSource   = "aws:kinesis"
	EventName     = "aws:kinesis:record"
	EventVersion  = "1.0"
	SchemaVersion = "1.0"
)

// Record is r, read from the shard shardID of the stream streamARN, as
// Lambda delivers it: its event ID is shardID:sequenceNumber, its data
// base64 in the JSON (encoding/json's way with []byte), and
// invokeIdentityARN is the role Lambda invoked the function with.
func Record(r types.Record, streamARN, shardID, region, invokeIdentityARN string) events.KinesisEventRecord {
	seq := aws.ToString(r.SequenceNumber)
	rec := events.KinesisEventRecord{
		AwsRegion:         region,
		EventID:           shardID + ":" + seq,
		EventName:         EventName,
		EventSource:       EventSource,
		EventSourceArn:    streamARN,
		EventVersion:      EventVersion,
		InvokeIdentityArn: invokeIdentityARN,
		Kinesis: events.KinesisRecord{
			Data:                 r.Data,
			PartitionKey:         aws.ToString(r.PartitionKey),
			SequenceNumber:       seq,
			KinesisSchemaVersion: SchemaVersion,
		},
	}
	if rec.Kinesis.Data == nil {
		rec.Kinesis.Data = []byte{} // "" in the event, as Lambda sends an empty record, not null
	}
	if t := r.ApproximateArrivalTimestamp; t != nil {
		rec.Kinesis.ApproximateArrivalTimestamp = events.SecondsEpochTime{Time: *t}
	}
	// Lambda names the encryption only of a record that has one.
	if r.EncryptionType != "" && r.EncryptionType != types.EncryptionTypeNone {
		rec.Kinesis.EncryptionType = string(r.EncryptionType)
	}
	return rec
}
