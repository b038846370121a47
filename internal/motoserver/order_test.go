package motoserver_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

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

// SQS hands a group's messages out oldest first, also when they turn
// visible again while a receive is running. Plain moto 5.2.1 reads the clock
// anew for each message it looks at: a message that turns visible midway
// is taken off the in-flight set then, which frees its group after the
// group's older message was passed over as blocked, so the later one comes
// out alone (a FIFO mapping saw B3 before B2). Here, in each of many
// groups, the second message turns visible a few milliseconds after the
// first while receives run back to back; each group is one more chance for
// a receive to be under way at that moment (most runs of plain moto hand
// out several groups' second messages alone).
func TestFIFOGroupTurningVisibleDuringAReceiveComesBackOldestFirst(t *testing.T) {
	c := sqs.NewFromConfig(moto.Config(t))
	ctx := t.Context()
	url := testenv.Queue(t, c, true, map[string]string{"VisibilityTimeout": "1"})

	const groups = 40
	var msgs [][2]string // group, body
	for g := range groups {
		msgs = append(msgs, [2]string{fmt.Sprint("G", g), fmt.Sprintf("G%d-1", g)}, [2]string{fmt.Sprint("G", g), fmt.Sprintf("G%d-2", g)})
	}
	for chunk := range slices.Chunk(msgs, 10) {
		var entries []types.SendMessageBatchRequestEntry
		for _, m := range chunk {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(m[1]), MessageBody: aws.String(m[1]),
				MessageGroupId: aws.String(m[0]), MessageDeduplicationId: aws.String(m[1])})
		}
		if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(n, visibility int32) ([]types.Message, error) {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: n, VisibilityTimeout: visibility})
		if err != nil {
			return nil, err
		}
		return out.Messages, nil
	}
	// Each group's two messages are received together, for long enough
	// that a slow machine cannot see them come back while the others are
	// received; then each one's visibility timeout is set to 1s, the
	// first's and right after it the second's, so that the second turns
	// visible a moment after the first.
	var handles [][2]*string
	for g := range groups {
		msgs, err := receive(2, 60)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || aws.ToString(msgs[1].Body) != fmt.Sprintf("G%d-2", g) {
			t.Fatalf("receive %d gave %d messages; want group G%d's two", g, len(msgs), g)
		}
		handles = append(handles, [2]*string{msgs[0].ReceiptHandle, msgs[1].ReceiptHandle})
	}
	start := time.Now()
	for _, h := range handles {
		for _, handle := range h {
			if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
				ReceiptHandle: handle, VisibilityTimeout: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Receive back to back, keeping what comes out in flight, until
	// every group has come back, 5s have passed or each receiver has made
	// 1000 receives.
	var mu sync.Mutex
	back := map[string]bool{}
	var alone []string
	deadline := time.Now().Add(5 * time.Second)
	time.Sleep(time.Until(start.Add(900 * time.Millisecond))) // the first group turns visible after 1s
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 1000 {
				if time.Now().After(deadline) {
					return
				}
				msgs, err := receive(10, 30)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bodies := map[string]bool{}
				for _, m := range msgs {
					bodies[aws.ToString(m.Body)] = true
				}
				for b := range bodies {
					first, second, ok := strings.Cut(b, "-")
					if !ok {
						continue
					}
					back[first] = true
					if second == "2" && !bodies[first+"-1"] {
						alone = append(alone, b)
					}
				}
				done := len(back) == groups
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(alone) > 0 {
		t.Errorf("%v came back without the older message of their group", alone)
	}
	if len(back) != groups {
		t.Errorf("%d of %d groups came back within 5s", len(back), groups)
	}
}
