package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/cmdline"
)

// dlqVisibility hides the messages of one receive from other readers
// while they are handled; those left are made visible again at the end.
const dlqVisibility = 120

// dlqReader takes the messages of a dead-letter queue once each in a run,
// for the commands that empty one (redrive, resend): a message it leaves
// stays invisible until the run ends (release), so that the run ends when
// the queue answers with nothing new, never looping on what it leaves.
type dlqReader struct {
	client  *sqs.Client
	url     string
	command string // "lambdakit redrive", for the messages on stderr
	stderr  io.Writer

	seen     map[string]bool // message IDs received in this run
	received int             // messages received in this run, once each
	left     []types.Message // received, not deleted: made visible again at the end
}

func newDLQReader(client *sqs.Client, url, command string, stderr io.Writer) *dlqReader {
	return &dlqReader{client: client, url: url, command: command, stderr: stderr, seen: map[string]bool{}}
}

// batchSize is how many messages to ask for after received, when the
// command takes limit at most (0: no bound): 0 once it has them all.
func batchSize(limit, received int) int32 {
	if limit == 0 {
		return 10
	}
	return int32(min(10, max(0, limit-received)))
}

// receive returns up to want messages not received before in this run:
// none when the queue answers with nothing new, or when ctx ends.
func (d *dlqReader) receive(ctx context.Context, want int32) ([]types.Message, error) {
	out, err := d.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(d.url),
		MaxNumberOfMessages:         want,
		VisibilityTimeout:           dlqVisibility,
		WaitTimeSeconds:             1, // a long poll asks every server, so that an empty answer means empty
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("receiving from %s: %w", d.url, err)
	}
	var fresh []types.Message
	for _, m := range out.Messages {
		id := aws.ToString(m.MessageId)
		if d.seen[id] {
			// Left earlier in this run and visible again: it is in
			// left already; this receipt handle is the valid one.
			d.replaceLeft(m)
			continue
		}
		d.seen[id] = true
		fresh = append(fresh, m)
	}
	return fresh, nil
}

// handleAll handles the messages of one receive in order: handle reports
// whether a message is done, to be deleted; the others are left, and so
// is every message once ctx ends. It returns how many messages done it
// could not delete.
func (d *dlqReader) handleAll(ctx context.Context, msgs []types.Message, handle func(context.Context, types.Message) bool) (notDeleted int) {
	var done []types.Message
	for _, m := range msgs {
		d.received++
		if ctx.Err() == nil && handle(ctx, m) {
			done = append(done, m)
		} else {
			d.left = append(d.left, m)
		}
	}
	return d.delete(done)
}

// delete deletes done, the messages handled, and returns how many it could
// not delete. It runs on a context of its own: a message handled is
// deleted even when the command is being interrupted. A message it cannot
// delete is left, visible again at the end, to be handled again by the
// next run.
func (d *dlqReader) delete(done []types.Message) (notDeleted int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for chunk := range slices.Chunk(done, 10) {
		in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(d.url)}
		for i, m := range chunk {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		out, err := d.client.DeleteMessageBatch(ctx, in)
		if err != nil {
			notDeleted += len(chunk)
			d.left = append(d.left, chunk...)
			for _, m := range chunk {
				fmt.Fprintf(d.stderr, "%s: not deleted %s from the DLQ after it was sent: %v\n", d.command, aws.ToString(m.MessageId), err)
			}
			continue
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(chunk) {
				continue
			}
			notDeleted++
			d.left = append(d.left, chunk[i])
			fmt.Fprintf(d.stderr, "%s: not deleted %s from the DLQ after it was sent: %s: %s\n",
				d.command, aws.ToString(chunk[i].MessageId), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return notDeleted
}

// replaceLeft keeps the newest receipt handle of a message that is left.
func (d *dlqReader) replaceLeft(m types.Message) {
	for i := range d.left {
		if aws.ToString(d.left[i].MessageId) == aws.ToString(m.MessageId) {
			d.left[i] = m
		}
	}
}

// release makes the messages left visible again at once, rather than after
// dlqVisibility, on a context of its own.
func (d *dlqReader) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for chunk := range slices.Chunk(d.left, 10) {
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(d.url)}
		for i, m := range chunk {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			})
		}
		out, err := d.client.ChangeMessageVisibilityBatch(ctx, in)
		switch {
		case err != nil:
			fmt.Fprintf(d.stderr, "%s: warning: %s left in the DLQ will stay invisible for up to %ds: %v\n", d.command, cmdline.Count(len(chunk), "message", "messages"), dlqVisibility, err)
		case len(out.Failed) > 0:
			fmt.Fprintf(d.stderr, "%s: warning: %s left in the DLQ will stay invisible for up to %ds\n", d.command, cmdline.Count(len(out.Failed), "message", "messages"), dlqVisibility)
		}
	}
	if len(d.left) > 0 && isFIFOURL(d.url) {
		d.heldBack(ctx)
	}
}

// heldBack tells how many messages of a FIFO DLQ the run never received:
// SQS gives no message of a group while an earlier one of it is in
// flight, so a message left in the run holds back the rest of its group
// (the relay's dead letters are all in one), and the run ends early with
// them still waiting.
func (d *dlqReader) heldBack(ctx context.Context) {
	counts := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := d.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(d.url), AttributeNames: counts})
	if err != nil {
		return
	}
	n := -len(d.left) // visible again now
	for _, a := range counts {
		v, _ := strconv.Atoi(out.Attributes[string(a)])
		n += v
	}
	if n > 0 {
		fmt.Fprintf(d.stderr, "%s: about %s more wait in the DLQ, not received: in a FIFO queue a message left holds back the rest of its group until the run ends\n",
			d.command, cmdline.Count(n, "message", "messages"))
	}
}

// dlqArgs refuses what the command lines of the commands that read a
// dead-letter queue (redrive, resend) refuse alike: arguments besides the
// flags, no -from (fromIs says what it is), a -max below 0.
func dlqArgs(fs *cmdline.Flags, rest []string, from string, max int, fromIs string) error {
	switch {
	case len(rest) > 0:
		return fs.UsageError("no arguments besides the flags; got %q", rest)
	case from == "":
		return fs.UsageError("-from is required: %s", fromIs)
	case max < 0:
		return fs.UsageError("-max %d: want 0 (all) or more", max)
	}
	return nil
}
