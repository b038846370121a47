package motoserver_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// A message is always visible, in flight or delayed, so a queue that holds
// messages never reads as empty: lambdakit run's -until-empty stops on
// that reading. moto 5.2.1 asks the clock anew for each count (and, for
// named attributes, for each lookup), so a message whose visibility
// timeout ended in between was counted in none; an internal/esm test of a
// FIFO queue saw all counts 0 with three messages left and stopped early.
// Here many messages come back into view, one every few milliseconds,
// while the counts are read without pause; each reading must add up.
func TestQueueCountsAddUpWhileMessagesComeBackIntoView(t *testing.T) {
	moto.Server(t) // skips or fails without moto_server
	// A server of its own: its hundreds of requests would push the shared
	// server's first lines (which TestStartRunsPatchedMoto reads) out of
	// the output it keeps.
	srv, err := motoserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	client := sqs.NewFromConfig(testenv.Config(t, srv))
	ctx := t.Context()
	url := testenv.Queue(t, client, false, map[string]string{"VisibilityTimeout": "1"})
	const n = 100
	for i := range n / 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for j := range 10 {
			id := strconv.Itoa(i*10 + j)
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(id)})
		}
		if _, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	// One at a time, so that their visibility timeouts end apart.
	for range n {
		if _, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The last one comes back into view a second after its receive.
	names := []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	readings, short := 0, 0
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end) && readings < 2000; readings++ {
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, name := range names {
			c, err := strconv.Atoi(out.Attributes[string(name)])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			total += c
		}
		if total != n {
			short++
			t.Logf("reading %d: %v (total %d; want %d)", readings, out.Attributes, total, n)
		}
	}
	if short > 0 {
		t.Errorf("%d of %d readings did not count every message", short, readings)
	}
}
