package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/cmdline"
)

const resendUsage = `Usage: lambdakit resend [flags] -from DLQ_URL

Sends again the messages of the outbox relay's dead letters, read from its
dead-letter queue (-from), once their cause is mended (the queue created,
say): each dead letter's messages go in order, with the IDs and
deduplication IDs the relay gives them (outbox.Resend), so that a message
sent before the failure is dropped as a copy, and no table is written. A
dead letter is deleted once all its messages were sent; one that fails (a
queue still missing, a truncated dead letter, a message that is no dead
letter, a record without its ID or messages under the -*-attr names) is
left in -from and told on standard error. -dry-run lists what each would
send, without the bodies, and touches nothing. The -*-attr flags name the
record table's attributes when the function renamed them. A queue on AWS
needs -live. More: the "Dead letters of the relay" section
of docs/operations.md.

Flags:
`

const resendExitStatus = `
Exit status:
  0    every dead letter received was resent and deleted (or, with
       -dry-run, listed)
  1    a dead letter was left in -from: it failed to send, could not be
       read as a dead letter, or was sent but could not be deleted (the
       next run sends it again, with the same IDs)
  2    usage error
  3    -from does not exist or cannot be read
  130  interrupted (the dead letter in flight is finished or left in -from)
`

// errNotDeadLetter means a message of -from is not a dead letter of the
// relay (outbox.DeadLetter): it is left where it is.
var errNotDeadLetter = errors.New("not a dead letter of the outbox relay")

// errOtherEndpoint means a message of a dead letter names a queue on
// another endpoint than -from's: the command sends only where -from
// points (see endpoint.go).
var errOtherEndpoint = errors.New("the queue is not on the dead-letter queue's endpoint")

// resendCommand is 'lambdakit resend': the relay's dead letters sent again.
type resendCommand struct {
	stdio
	flags  *cmdline.Flags
	from   string
	dryRun bool
	live   bool
	max    int
	record dynamostore.Options // the attribute names of -*-attr

	client *sqs.Client
	where  string // where -from is (queueHost.where)
	dlq    *dlqReader

	resent, sent, left, notDeleted int
}

// parse reads the command line.
func (c *resendCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "resend", resendUsage, resendExitStatus)
	c.flags = fs
	fs.StringVar(&c.from, "from", "", "the relay's dead-letter queue `URL` (required)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "list what each dead letter would send; send and delete nothing")
	fs.BoolVar(&c.live, "live", false, liveHelp)
	fs.IntVar(&c.max, "max", 0, "take at most this many `dead letters` from -from (0: all)")
	for _, a := range []struct {
		dst        *string
		name, what string
	}{
		{&c.record.KeyAttr, "key-attr", "partition key (KeyAttr; default id)"},
		{&c.record.SortKeyAttr, "sort-key-attr", "sort key, in Powertools' composite-key layout (SortKeyAttr)"},
		{&c.record.StatusAttr, "status-attr", "status (StatusAttr; default status)"},
		{&c.record.LeaseAttr, "lease-attr", "lease (LeaseAttr; default lease)"},
		{&c.record.MessagesAttr, "messages-attr", "messages (MessagesAttr; default messages)"},
	} {
		fs.StringVar(a.dst, a.name, "", "the record's "+a.what+" `attribute`, if the function renamed it in dynamostore.Options")
	}
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if err := dlqArgs(fs, rest, c.from, c.max, "the relay's dead-letter queue's URL"); err != nil {
		return err
	}
	if !validQueueURL(c.from) {
		return fs.UsageError("-from %q: want a queue URL, such as https://sqs.us-east-1.amazonaws.com/123456789012/outbox-dlq", c.from)
	}
	if _, err := dynamostore.ResolveOptions(func(o *dynamostore.Options) { *o = c.record }); err != nil {
		return fs.UsageError("the -*-attr flags: %v", err)
	}
	return nil
}

// Run implements command.
func (c *resendCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	// -from names where the queues are: the dead letters' queues must be
	// there too (see endpoint.go).
	client, err := newSQSClient(ctx, c.environ, "", c.live, c.from)
	if err != nil {
		return asUsage(c.flags, err, cmdline.CannotRun)
	}
	h, _ := parseQueueURL(c.from) // newSQSClient parsed it
	c.client, c.where = client, h.where()
	c.dlq = newDLQReader(client, c.from, "lambdakit resend", c.stderr)
	// -from is read first, so that a wrong URL stops the command before
	// anything else.
	if _, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(c.from), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	}); err != nil {
		return c.stop(ctx, queueReadError(c.from, err))
	}
	for ctx.Err() == nil {
		want := batchSize(c.max, c.dlq.received)
		if want == 0 {
			break
		}
		fresh, err := c.dlq.receive(ctx, want)
		if err != nil {
			return c.stop(ctx, err)
		}
		if len(fresh) == 0 {
			break
		}
		c.notDeleted += c.dlq.handleAll(ctx, fresh, c.handle)
	}
	return c.stop(ctx, nil)
}

// handle resends one dead letter, or lists it with -dry-run, and reports
// whether it was resent.
func (c *resendCommand) handle(ctx context.Context, m types.Message) bool {
	id := aws.ToString(m.MessageId)
	dl, err := decodeDeadLetter(aws.ToString(m.Body))
	var plan []*sqs.SendMessageInput
	if err == nil {
		plan, err = c.check(ctx, dl)
	}
	if err != nil {
		c.left++
		fmt.Fprintf(c.stderr, "lambdakit resend: left %s%s: %v\n", id, eventOf(dl), err)
		return false
	}
	if c.dryRun {
		c.resent++
		c.sent += len(plan)
		for _, in := range plan {
			fmt.Fprintf(c.stdout, "%s: would send %s\n", id, describeSend(in))
		}
		return false // nothing to delete
	}
	sender := &reportingSender{client: c.client, w: c.stdout, prefix: id + ": "}
	err = outbox.Resend(ctx, sender, dl, c.recordOptions)
	c.sent += sender.n
	if err != nil {
		c.left++
		fmt.Fprintf(c.stderr, "lambdakit resend: left %s%s, after %s of its %d sent: %v\n", id, eventOf(dl), cmdline.Count(sender.n, "message", "messages"), len(plan), err)
		return false
	}
	c.resent++
	fmt.Fprintf(c.stdout, "resent %s%s: %s\n", id, eventOf(dl), cmdline.Count(sender.n, "message", "messages"))
	return true
}

func (c *resendCommand) recordOptions(o *outbox.RelayOptions) { o.Record = c.record }

// check returns what dl would send, without sending it, once it checked
// that the dead letter is one Resend can send (Resend refuses one that
// reads, under the -*-attr names, as sending nothing or as a record
// without its ID: outbox.ErrBadItem) and that each of its queues is on
// -from's endpoint. A dead letter that fails here is left before any of
// its messages is sent.
func (c *resendCommand) check(ctx context.Context, dl outbox.DeadLetter) ([]*sqs.SendMessageInput, error) {
	var plan planSender
	if err := outbox.Resend(ctx, &plan, dl, c.recordOptions); err != nil {
		if errors.Is(err, outbox.ErrBadItem) {
			err = fmt.Errorf("%w (if the function renamed the record's attributes, give the -*-attr flags their names)", err)
		}
		return nil, err
	}
	for _, in := range plan.ins {
		q := aws.ToString(in.QueueUrl)
		if h, err := parseQueueURL(q); err != nil || h.where() != c.where {
			return nil, fmt.Errorf("%w: %s, not %s", errOtherEndpoint, q, c.where)
		}
	}
	return plan.ins, nil
}

// decodeDeadLetter reads the body of a message of the relay's dead-letter
// queue.
func decodeDeadLetter(body string) (outbox.DeadLetter, error) {
	var dl outbox.DeadLetter
	if err := json.Unmarshal([]byte(body), &dl); err != nil {
		return outbox.DeadLetter{}, fmt.Errorf("%w: %v", errNotDeadLetter, err)
	}
	if dl.EventID == "" || len(dl.NewImage) == 0 {
		return outbox.DeadLetter{}, fmt.Errorf("%w: no eventID or newImage", errNotDeadLetter)
	}
	return dl, nil
}

// eventOf names dl's stream record in a message, when there is one.
func eventOf(dl outbox.DeadLetter) string {
	if dl.EventID == "" {
		return ""
	}
	return " (event " + dl.EventID + ")"
}

// planSender takes the sends Resend would make, and makes none.
type planSender struct{ ins []*sqs.SendMessageInput }

func (p *planSender) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	p.ins = append(p.ins, in)
	return &sqs.SendMessageOutput{}, nil
}

// reportingSender sends with client, and says on w what it sent.
type reportingSender struct {
	client *sqs.Client
	w      io.Writer
	prefix string
	n      int // messages sent
}

func (s *reportingSender) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := s.client.SendMessage(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	s.n++
	fmt.Fprintf(s.w, "%ssent %s as %s\n", s.prefix, describeSend(in), aws.ToString(out.MessageId))
	return out, nil
}

// describeSend says what a send of the relay is: the message's ID
// (outbox.IDAttribute), queue, group and size, never its body, which may
// hold personal data.
func describeSend(in *sqs.SendMessageInput) string {
	parts := []string{cmdline.Count(len(aws.ToString(in.MessageBody)), "byte", "bytes")}
	if g := aws.ToString(in.MessageGroupId); g != "" {
		parts = append([]string{"group " + g}, parts...)
	}
	return fmt.Sprintf("%s to %s (%s)", aws.ToString(in.MessageAttributes[outbox.IDAttribute].StringValue), aws.ToString(in.QueueUrl), strings.Join(parts, ", "))
}

// stop makes the dead letters left visible, prints the summary, and
// returns how the command ended: err, a failure of the command itself,
// else the outcome of the dead letters.
func (c *resendCommand) stop(ctx context.Context, err error) error {
	c.dlq.release()
	c.summary(c.stderr)
	switch {
	case ctx.Err() != nil:
		return cmdline.ErrInterrupted
	case err != nil:
		return cmdline.CannotRun(err)
	case c.left+c.notDeleted > 0:
		return cmdline.ErrFailed // the summary says so
	}
	return nil
}

func (c *resendCommand) summary(w io.Writer) {
	if c.dryRun {
		fmt.Fprintf(w, "lambdakit resend: dry run: received %d: would resend %d (%s), left %d\n", c.dlq.received, c.resent, cmdline.Count(c.sent, "message", "messages"), c.left)
		return
	}
	fmt.Fprintf(w, "lambdakit resend: received %d: resent %d (%s sent), left %d, not deleted %d\n", c.dlq.received, c.resent, cmdline.Count(c.sent, "message", "messages"), c.left, c.notDeleted)
}
