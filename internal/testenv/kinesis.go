package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// KinesisStream creates a provisioned Kinesis data stream named for the
// test, with the number of shards asked, waits (up to 30 s) until it is
// active, and returns its ARN.
func KinesisStream(tb testing.TB, client *kinesis.Client, shards int32) string {
	tb.Helper()
	name := Name(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{
		StreamName: aws.String(name), ShardCount: aws.Int32(shards),
		StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
	}); err != nil && !errors.As(err, new(*types.ResourceInUseException)) {
		// An existing stream of this test's own name is the one an earlier
		// attempt of this call created before its answer was lost.
		tb.Fatalf("testenv: CreateStream %s: %v", name, err)
	}
	// moto makes a stream active at once; AWS takes seconds.
	for ctx.Err() == nil {
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			tb.Fatalf("testenv: DescribeStreamSummary %s: %v", name, err)
		}
		if d := out.StreamDescriptionSummary; d.StreamStatus == types.StreamStatusActive {
			return aws.ToString(d.StreamARN)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("testenv: the stream %s is not active after 30s", name)
	return ""
}
