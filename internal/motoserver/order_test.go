package motoserver_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// sendGroup sends bodies to the FIFO queue url in group, in order, and
// returns their sequence numbers.
func sendGroup(t *testing.T, c *sqs.Client, url, group string, bodies ...string) []string {
	t.Helper()
	var seqs []string
	for _, b := range bodies {
		out, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(b)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}
	return seqs
}

// SQS numbers a FIFO queue's messages in the order they are sent, and of a
// group's messages that come back together after their visibility
// timeout, hands out the oldest first. Plain moto 5.2.1 draws random
// sequence numbers, and hands out the later message first.
func TestFIFOGroupComesBackOldestFirst(t *testing.T) {
	c := sqs.NewFromConfig(moto.Config(t))
	url := testenv.Queue(t, c, true, map[string]string{"VisibilityTimeout": "1"})
	seqs := sendGroup(t, c, url, "A", "A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8")
	for i := 1; i < len(seqs); i++ {
		if len(seqs[i]) < len(seqs[i-1]) || (len(seqs[i]) == len(seqs[i-1]) && seqs[i] <= seqs[i-1]) {
			t.Errorf("sequence numbers %v; want them growing in the order sent", seqs)
			break
		}
	}
	first, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 2})
	if err != nil || len(first.Messages) != 2 {
		t.Fatalf("first receive: %v, %v; want A1 and A2", first, err)
	}
	// Receive one message at a time until the two come back, within 5s.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			if got := aws.ToString(out.Messages[0].Body); got != "A1" {
				t.Errorf("after the visibility timeout the group gave %s first; want A1, its oldest", got)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("A1 and A2 did not come back within 5s")
}

// SQS hands a group's messages to one receive at a time: while one is in
// flight, no other receive gets the group's next. Plain moto 5.2.1 reads
// the groups in flight when a receive starts, before its long poll waits,
// so receives that wait on an empty queue each get one of the group's
// messages once they are sent.
func TestFIFOConcurrentReceivesNeverSplitAGroup(t *testing.T) {
	c := sqs.NewFromConfig(moto.Config(t))
	const receivers = 4
	url := testenv.Queue(t, c, true, map[string]string{"VisibilityTimeout": "30"})
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for range receivers {
		wg.Go(func() {
			out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 2})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range out.Messages {
				got = append(got, aws.ToString(m.Body))
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the receives are waiting
	sendGroup(t, c, url, "A", "A1", "A2", "A3", "A4")
	wg.Wait()
	if len(got) != 1 {
		t.Errorf("%d receives waiting at once got %v from one group; want its first message, once", receivers, got)
	}
}

// Kinesis keeps a split shard's records in it, closed, and writes new
// records to its children. Plain moto 5.2.1 moves the records into the
// children, as if written again, and goes on writing to the parent.
func TestKinesisSplitKeepsParentRecords(t *testing.T) {
	c := kinesis.NewFromConfig(moto.Config(t))
	ctx := t.Context()
	arn := testenv.KinesisStream(t, c, 1)
	put := func(data string) string {
		t.Helper()
		out, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamARN: aws.String(arn), PartitionKey: aws.String(data), Data: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ShardId)
	}
	parent := put("p1")
	put("p2")
	if _, err := c.SplitShard(ctx, &kinesis.SplitShardInput{StreamARN: aws.String(arn), ShardToSplit: aws.String(parent),
		NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil { // 2^127
		t.Fatal(err)
	}
	for i := range 4 {
		if shard := put(fmt.Sprint("c", i)); shard == parent {
			t.Errorf("a record written after the split went to the closed parent %s", parent)
		}
	}
	it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamARN: aws.String(arn), ShardId: aws.String(parent), ShardIteratorType: "TRIM_HORIZON"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{StreamARN: aws.String(arn), ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range out.Records {
		got = append(got, string(r.Data))
	}
	if strings.Join(got, " ") != "p1 p2" {
		t.Errorf("the split parent holds %v; want p1 p2", got)
	}
}
