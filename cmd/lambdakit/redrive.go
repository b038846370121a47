package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/cmdline"
)

const redriveUsage = `Usage: lambdakit redrive [flags] -from DLQ_URL -to QUEUE_URL

Moves messages from a dead-letter queue (-from) back to a queue (-to), once
the cause of their failure is fixed: each is sent as it was (body,
attributes, AWSTraceHeader, FIFO group) and deleted from -from only after -to
accepted it. FIFO groups keep their order (after a failed send, the rest of
the group is held back), and each FIFO message gets a new deduplication ID,
its old one + "~" + 26 random characters, since SQS would drop a resend with
the old one for 5 minutes. -dry-run lists what would move and touches
nothing. Both queues are FIFO or both standard, on one endpoint, and two
queues (their ARNs differ, whatever the URLs' spelling); a queue on AWS needs
-live. More: the "Dead-letter queue and redrive" section of
docs/operations.md.

Flags:
`

const redriveExitStatus = `
Exit status:
  0    every message received was moved (or, with -dry-run, listed)
  1    a message failed to send, was held back, or was sent but could not be
       deleted from -from (it will be sent again by the next run)
  2    usage error (queue URLs that the endpoint configured contradicts, on
       two endpoints, or naming one queue, included)
  3    a queue does not exist or cannot be read, as in every lambdakit
       command: a missing queue or table is 3
  130  interrupted (the message in flight is finished or left in -from)
`

// redriveCommand is 'lambdakit redrive': messages from a dead-letter queue
// back to a queue.
type redriveCommand struct {
	stdio
	flags    *cmdline.Flags
	from, to string
	dryRun   bool
	live     bool
	max      int

	client  *sqs.Client
	fifo    bool
	dlq     *dlqReader
	blocked map[string]bool // FIFO groups with a message that failed to send

	moved, failed, held, notDeleted int
}

// parse reads the command line.
func (r *redriveCommand) parse(args []string) error {
	fs := cmdline.NewFlags(r.stderr, "redrive", redriveUsage, redriveExitStatus)
	r.flags = fs
	fs.StringVar(&r.from, "from", "", "the dead-letter queue's `URL` (required)")
	fs.StringVar(&r.to, "to", "", "the `URL` of the queue to move the messages to (required)")
	fs.BoolVar(&r.dryRun, "dry-run", false, "list what would move; send and delete nothing")
	fs.BoolVar(&r.live, "live", false, liveHelp)
	fs.IntVar(&r.max, "max", 0, "take at most this many `messages` from -from (0: all)")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if err := dlqArgs(fs, rest, r.from, r.max, "the dead-letter queue's URL"); err != nil {
		return err
	}
	if r.to == "" {
		return fs.UsageError("-to is required: the URL of the queue to move the messages to")
	}
	for name, u := range map[string]string{"-from": r.from, "-to": r.to} {
		if !validQueueURL(u) {
			return fs.UsageError("%s %q: want a queue URL, such as https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo", name, u)
		}
	}
	switch {
	case r.from == r.to:
		return fs.UsageError("-from and -to are the same queue")
	case isFIFOURL(r.from) != isFIFOURL(r.to):
		return fs.UsageError("-from and -to must both be FIFO queues (names ending in .fifo) or both standard queues")
	}
	return nil
}

func isFIFOURL(u string) bool { return strings.HasSuffix(u, ".fifo") }

// Run implements command.
func (r *redriveCommand) Run(ctx context.Context, args []string) error {
	if err := r.parse(args); err != nil {
		return err
	}
	// The queue URLs name where the queues are (see endpoint.go).
	client, err := newSQSClient(ctx, r.environ, "", r.live, r.from, r.to)
	if err != nil {
		return asUsage(r.flags, err, cmdline.CannotRun)
	}
	r.client, r.fifo = client, isFIFOURL(r.from)
	r.dlq, r.blocked = newDLQReader(client, r.from, "lambdakit redrive", r.stderr), map[string]bool{}
	// Both queues are read first, so that a wrong URL stops the command
	// before any message is touched.
	var arns [2]string
	for i, q := range []string{r.from, r.to} {
		if arns[i], err = r.checkQueue(ctx, q); err != nil {
			return r.stop(ctx, err)
		}
	}
	if arns[0] == arns[1] {
		// Two spellings of one queue's URL (the regional and legacy hosts
		// of a region, a host or scheme in capitals): each message would
		// be sent back to the DLQ under a new ID, counted moved, and
		// received again, without end.
		return r.flags.UsageError("-from and -to are the same queue, %s", arns[0])
	}
	for ctx.Err() == nil {
		more, err := r.round(ctx)
		if err != nil {
			return r.stop(ctx, err)
		}
		if !more {
			break
		}
	}
	return r.stop(ctx, nil)
}

// checkQueue reads a queue's FifoQueue attribute, which also tells that it
// exists and can be read, and returns its ARN, which names it whatever
// the spelling of its URL.
func (r *redriveCommand) checkQueue(ctx context.Context, queueURL string) (arn string, err error) {
	out, err := r.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", queueReadError(queueURL, err)
	}
	if fifo := out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"; fifo != r.fifo {
		return "", fmt.Errorf("the queue %s says FifoQueue=%v, but its URL says otherwise", queueURL, fifo)
	}
	arn = out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("the queue %s did not give its QueueArn", queueURL)
	}
	return arn, nil
}

// round receives one batch from -from and handles it. It reports whether
// there may be more to do.
func (r *redriveCommand) round(ctx context.Context) (more bool, err error) {
	want := batchSize(r.max, r.dlq.received)
	if want == 0 {
		return false, nil
	}
	fresh, err := r.dlq.receive(ctx, want)
	if err != nil {
		return false, err
	}
	if len(fresh) == 0 {
		return false, nil
	}
	r.notDeleted += r.dlq.handleAll(ctx, fresh, r.handle)
	return true, nil
}

// handle sends one message to -to, or lists it with -dry-run, and reports
// whether it was sent.
func (r *redriveCommand) handle(ctx context.Context, m types.Message) bool {
	id, group, dedup := aws.ToString(m.MessageId), m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]
	newDedup := ""
	describe := func() string {
		var parts []string
		if r.fifo && newDedup != "" {
			parts = append(parts, "group "+group, "dedup "+dedup+" as "+newDedup)
		} else if r.fifo {
			parts = append(parts, "group "+group, "dedup "+dedup)
		}
		parts = append(parts, cmdline.Count(len(aws.ToString(m.Body)), "byte", "bytes"), cmdline.Count(len(m.MessageAttributes), "attribute", "attributes"))
		return strings.Join(parts, ", ")
	}
	switch {
	case r.dryRun:
		r.moved++
		fmt.Fprintf(r.stdout, "would move %s (%s)\n", id, describe())
		return false
	case r.fifo && r.blocked[group]:
		r.held++
		fmt.Fprintf(r.stderr, "lambdakit redrive: held back %s: an earlier message of group %s failed to send\n", id, group)
		return false
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(r.to),
		MessageBody:       m.Body,
		MessageAttributes: m.MessageAttributes,
	}
	if trace := m.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)]; trace != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(trace)},
		}
	}
	if r.fifo {
		newDedup = redriveDedupID(dedup)
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(newDedup)
	}
	out, err := r.client.SendMessage(ctx, in)
	if err == nil && aws.ToString(out.MessageId) == "" {
		err = errors.New("SendMessage answered without a MessageId: not known to be enqueued")
	}
	if err != nil {
		r.failed++
		if r.fifo {
			r.blocked[group] = true
		}
		fmt.Fprintf(r.stderr, "lambdakit redrive: failed %s: %v\n", id, err)
		return false
	}
	r.moved++
	fmt.Fprintf(r.stdout, "moved %s as %s (%s)\n", id, aws.ToString(out.MessageId), describe())
	return true
}

// redriveDedupID returns the MessageDeduplicationId with which a FIFO
// message whose deduplication ID was old is sent to -to: old, without the
// suffix of an earlier redrive and cut to 101 bytes, then "~" and 26
// random characters (crypto/rand.Text: 130 bits, base32), 128 bytes at most,
// as SQS allows.
//
// The ID is new for every send, never the old one. SQS keeps a FIFO queue's
// deduplication IDs for 5 minutes after it accepted their messages, even
// once they were received, moved to the DLQ or deleted, and answers a send
// with one of them as sent (with a MessageId) without enqueuing it: the old
// ID, resent within that window, would lose the message, since the command
// deletes from -from what -to accepted.
//
// Random rather than derived from the DLQ message: an ID derived from the
// message (its ID, its receipt) would let SQS drop the second copy when a
// run sent the message and failed to delete it, and the next run, within 5
// minutes, sends it again; but the same message can come back to the DLQ
// under the same message ID (a queue's redrive policy moves a message with
// its ID, and other redrive tools may resend it under it), and a derived ID
// that -to saw in the last 5 minutes would drop it for good. A duplicate is
// harmless (the consumer skips it by its idempotency key); a drop loses the
// message. The SDK retries a failed call with the same input, so a retry of
// one send still carries the same ID and is deduplicated by SQS.
//
// The old ID is kept in front so that an operator can still go from a
// redriven message to its idempotency record, "<prefix>#<the ID up to ~>"
// when lambdakit's producer sent it (a 64-character hex digest).
func redriveDedupID(old string) string {
	if i := strings.LastIndexByte(old, '~'); i >= 0 && len(old)-i-1 == redriveSuffixLen {
		old = old[:i]
	}
	if len(old) > 128-1-redriveSuffixLen {
		old = old[:128-1-redriveSuffixLen]
	}
	return old + "~" + rand.Text()
}

// redriveSuffixLen is the length of rand.Text's result.
const redriveSuffixLen = 26

// stop makes the messages left visible, prints the summary, and returns
// how the command ended: err, a failure of the command itself, else the
// outcome of the messages.
func (r *redriveCommand) stop(ctx context.Context, err error) error {
	r.dlq.release()
	r.summary(r.stderr)
	switch {
	case ctx.Err() != nil:
		return cmdline.ErrInterrupted
	case err != nil:
		return cmdline.CannotRun(err)
	case r.failed+r.held+r.notDeleted > 0:
		return cmdline.ErrFailed // the summary says so
	}
	return nil
}

func (r *redriveCommand) summary(w io.Writer) {
	if r.dryRun {
		fmt.Fprintf(w, "lambdakit redrive: dry run: received %d: would move %d\n", r.dlq.received, r.moved)
		return
	}
	fmt.Fprintf(w, "lambdakit redrive: received %d: moved %d, failed %d, held back %d, not deleted %d\n", r.dlq.received, r.moved, r.failed, r.held, r.notDeleted)
}
