package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

const publishUsage = `Usage: lambdakit publish [flags] [FILE]

Sends each line of FILE (JSON Lines; standard input when FILE is absent or
"-") to the SQS queue -queue as one message. A FIFO queue needs -key-field
and -group-field: the deduplication ID is the hex SHA-256 of the key, so the
consumer's record of the message is "<prefix>#<deduplication ID>" (SQS drops
a copy within 5 minutes; the consumer's records catch the rest). A line that
is not a JSON object, lacks a field, is too large or duplicates an earlier
key is reported with its line number and skipped; a JSON array is refused
whole (convert it with jq -c '.[]' FILE). The queue URL says where the calls
go; a queue on AWS needs -live. Standard error ends with "N lines: sent S,
duplicates in the input D, failed F". Flags come before FILE. More: the
"lambdakit publish" section of docs/local-tooling.md.

Flags:
`

const publishExitStatus = `
Exit status:
  0    every valid line was sent (a duplicate of a sent line counts as sent)
  1    a line was skipped or failed to send
  2    usage error (a queue URL that the endpoint configured contradicts
       included), or FILE cannot be opened or read, or is a JSON array
  3    the queue does not exist or cannot be read, as in every lambdakit
       command: a missing queue or table is 3
  130  interrupted
`

// Publishing sends this many messages per Send, so that a long input is
// read, sent and reported as it goes.
const (
	publishChunk    = 100
	publishProgress = 1000
)

// publishCommand is 'lambdakit publish': JSON lines to an SQS queue.
type publishCommand struct {
	stdio
	flags      *cmdline.Flags
	queue      string
	keyField   string
	groupField string
	maxSize    int
	live       bool
	in         io.Reader // FILE, or standard input
	inName     string    // FILE, or "-" for standard input
	file       *os.File  // FILE, for Run to close; nil for standard input
}

// parse reads the command line and opens FILE, last.
func (c *publishCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "publish", publishUsage, publishExitStatus)
	c.flags = fs
	fs.StringVar(&c.queue, "queue", "", "the queue's `URL` (required)")
	fs.StringVar(&c.keyField, "key-field", "", "the JSON `path` of the idempotency key (\"id\", \"order.id\"), as the consumer's lambdakit.KeyFromField; required for FIFO queues")
	fs.StringVar(&c.groupField, "group-field", "", "the JSON `path` of the message group ID; required for FIFO queues")
	fs.BoolVar(&c.live, "live", false, liveHelp)
	fs.IntVar(&c.maxSize, "max-size", 0, "refuse lines over this many `bytes`, and do not read the queue's attributes (default: the queue's MaximumMessageSize)")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	file := "-"
	switch len(rest) {
	case 0:
	case 1:
		file = rest[0]
	default:
		return fs.UsageError("one FILE at most; got %q", rest)
	}
	if c.queue == "" {
		return fs.UsageError("-queue is required")
	}
	if !validQueueURL(c.queue) {
		return fs.UsageError("-queue %q: want a queue URL, such as https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo", c.queue)
	}
	if strings.HasSuffix(c.queue, ".fifo") && (c.keyField == "" || c.groupField == "") {
		return fs.UsageError("-queue is a FIFO queue: -key-field and -group-field are required")
	}
	for name, path := range map[string]string{"-key-field": c.keyField, "-group-field": c.groupField} {
		if path != "" && slices.Contains(strings.Split(path, "."), "") {
			return fs.UsageError("%s %q: want field names separated by single dots", name, path)
		}
	}
	if c.maxSize < 0 {
		return fs.UsageError("-max-size %d: want a positive number of bytes", c.maxSize)
	}
	c.in, c.inName = c.stdin, file
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return cmdline.BadInput(err)
		}
		c.in, c.file = f, f
	}
	return nil
}

// Run implements command.
func (c *publishCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	if c.file != nil {
		defer c.file.Close()
	}
	p, err := c.newProducer(ctx)
	if err != nil {
		return err
	}
	pub := &publisher{std: c.stdio, p: p, queue: c.queue, hasKey: c.keyField != "", seen: map[[sha256.Size]byte]seenLine{}}
	err = pub.run(ctx, c.in)
	if errors.Is(err, errJSONArray) {
		// Told once, in place of an error for every line of the array.
		return cmdline.BadInput(jsonArrayError(c.inName))
	}
	fmt.Fprintf(c.stderr, "lambdakit publish: %s\n", pub.counts())
	switch {
	case ctx.Err() != nil:
		return cmdline.ErrInterrupted
	case pub.queueErr != nil:
		return cmdline.CannotRun(pub.queueErr)
	case err != nil:
		return cmdline.BadInput(fmt.Errorf("reading input: %w", err))
	case pub.failed > 0:
		return cmdline.ErrFailed // each failed line is told
	}
	return nil
}

// newProducer builds the producer, reading the queue's attributes unless
// -max-size was given.
func (c *publishCommand) newProducer(ctx context.Context) (*producer.Producer, error) {
	// The queue URL names where the queue is (see endpoint.go); the SDK
	// reads the rest from the process environment: credentials, region.
	client, err := newSQSClient(ctx, c.environ, "", c.live, c.queue)
	if err != nil {
		return nil, asUsage(c.flags, err, cmdline.CannotRun)
	}
	opts := func(o *producer.Options) {
		if c.keyField != "" {
			o.Key = lambdakit.KeyFunc(namedField("key", "-key-field", c.keyField))
		}
		if c.groupField != "" {
			o.Group = producer.GroupFunc(namedField("group", "-group-field", c.groupField))
		}
		if c.maxSize > 0 {
			o.MaxMessageSize = c.maxSize
		}
	}
	var p *producer.Producer
	if c.maxSize > 0 {
		p, err = producer.New(client, c.queue, opts)
	} else {
		p, err = producer.NewFromQueue(ctx, client, c.queue, opts)
	}
	switch {
	case errors.Is(err, producer.ErrNoKeyFunc), errors.Is(err, producer.ErrNoGroupFunc):
		return nil, c.flags.UsageError("the queue is a FIFO queue: -key-field and -group-field are required")
	case ctx.Err() != nil:
		return nil, cmdline.ErrInterrupted
	case err != nil:
		return nil, cmdline.CannotRun(queueReadError(c.queue, err))
	}
	return p, nil
}

// namedField finds the field at path of a line as lambdakit.KeyFromField
// does in the consumer, and names it, when it cannot, as what it is for
// ("key", "group") with its flag: lambdakit's own error speaks of an
// idempotency key whatever the field is.
func namedField(what, flag, path string) func(*events.SQSMessage) (string, error) {
	field := lambdakit.KeyFromField(path)
	return func(msg *events.SQSMessage) (string, error) {
		v, err := field(msg)
		if err != nil {
			return "", &fieldError{what: what, flag: flag, path: path, err: err}
		}
		return v, nil
	}
}

// fieldError is a line whose key or group field cannot be used.
type fieldError struct {
	what, flag, path string
	err              error // lambdakit's
}

// Error says which field, and why, in lambdakit's words without its own
// prefix: `group field "customer_id" (-group-field) missing or null`.
func (e *fieldError) Error() string {
	name := fmt.Sprintf("%s field %q (%s)", e.what, e.path, e.flag)
	why := e.err.Error()
	for _, prefix := range []error{lambdakit.ErrNoKey, lambdakit.ErrInvalidKey} {
		why = strings.TrimPrefix(why, prefix.Error()+": ")
	}
	if rest, ok := strings.CutPrefix(why, fmt.Sprintf("field %q ", e.path)); ok {
		return name + " " + rest
	}
	return name + ": " + strings.TrimPrefix(why, fmt.Sprintf("field %q: ", e.path))
}

func (e *fieldError) Unwrap() error { return e.err }

// errJSONArray is an input that starts as a JSON array: see jsonArrayError.
var errJSONArray = errors.New("a JSON array")

// jsonArrayError says what to do with a JSON array given as FILE (name,
// "-" for standard input), once, rather than an error for each of its
// lines.
func jsonArrayError(name string) error {
	if name == "-" {
		return errors.New("standard input is a JSON array, but publish reads JSON Lines, one JSON object per line: nothing was sent. Pipe it through jq -c '.[]' first")
	}
	return fmt.Errorf("%s is a JSON array, but publish reads JSON Lines, one JSON object per line: nothing was sent. Convert it with jq -c '.[]' %s | lambdakit publish [flags]", name, name)
}

// startsJSONArray reports whether the first line of an input (not blank)
// starts a JSON array: no line of JSON Lines for publish can.
func startsJSONArray(first string) bool {
	return strings.HasPrefix(strings.TrimLeft(first, " \t\ufeff"), "[")
}

// seenLine is the first line with a key.
type seenLine struct {
	line int
	body [sha256.Size]byte
}

// publisher reads lines, sends them in chunks, and keeps the counts.
type publisher struct {
	std    stdio
	p      *producer.Producer
	queue  string                         // its URL, for messages
	hasKey bool                           // a key was asked for: duplicates in the input are found
	seen   map[[sha256.Size]byte]seenLine // by the key's hash

	lines, sent, duplicates, failed int
	queueErr                        error // the queue does not exist: nothing more can be sent

	chunk     []producer.Message
	chunkLine []int
}

func (pub *publisher) run(ctx context.Context, in io.Reader) error {
	// Lines are read on their own goroutine, so that an interrupt is not
	// stuck behind a read from a terminal or a pipe that stays open.
	// Stopping early stops the reader too.
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	lines := make(chan logline.Line, publishChunk)
	errc := make(chan error, 1)
	go func() { errc <- readLines(readCtx, in, lines) }()
	for {
		var l logline.Line
		var ok bool
		select {
		case <-ctx.Done():
		case l, ok = <-lines:
		}
		if !ok {
			// End of input, or interrupted: the lines read so far are sent,
			// or reported failed with the interrupt.
			pub.flush(ctx)
			if ctx.Err() != nil {
				return nil
			}
			return <-errc
		}
		if pub.lines == 0 && startsJSONArray(l.Text) {
			return errJSONArray
		}
		pub.lines++
		pub.add(ctx, l.N, l.Text)
		if pub.lines%publishProgress == 0 {
			// Sent first, so that the counts are exact.
			pub.flush(ctx)
			fmt.Fprintf(pub.std.stderr, "lambdakit publish: progress: %s\n", pub.counts())
		}
		if pub.queueErr != nil {
			return nil // Run tells it
		}
	}
}

// readLines sends the lines of in that are not blank on out, and closes
// it at the end of in or when ctx ends.
func readLines(ctx context.Context, in io.Reader, out chan<- logline.Line) error {
	defer close(out)
	for l, err := range logline.Lines(in) {
		if err != nil {
			return err
		}
		select {
		case out <- l:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// add checks one line and queues it for sending.
func (pub *publisher) add(ctx context.Context, n int, text string) {
	if !isJSONObject(text) {
		pub.fail(n, "not a JSON object")
		return
	}
	msg := producer.Message{Body: text}
	r := pub.p.Check(msg)
	if r.Err != nil {
		var field *fieldError
		if errors.As(r.Err, &field) {
			pub.fail(n, field.Error()) // without the producer's words for it
			return
		}
		pub.fail(n, r.Err.Error())
		return
	}
	if pub.hasKey {
		k := sha256.Sum256([]byte(r.Key))
		body := sha256.Sum256([]byte(text))
		if first, ok := pub.seen[k]; ok {
			if first.body != body {
				pub.fail(n, fmt.Sprintf("same key as line %d (%q) but a different body: not sent", first.line, r.Key))
				return
			}
			pub.duplicates++
			fmt.Fprintf(pub.std.stderr, "lambdakit publish: line %d: duplicate of line %d (key %q): not sent again\n", n, first.line, r.Key)
			return
		}
		pub.seen[k] = seenLine{line: n, body: body}
	}
	pub.chunk = append(pub.chunk, msg)
	pub.chunkLine = append(pub.chunkLine, n)
	if len(pub.chunk) == publishChunk {
		pub.flush(ctx)
	}
}

// flush sends the queued lines and reports the ones that failed.
func (pub *publisher) flush(ctx context.Context) {
	if len(pub.chunk) == 0 {
		return
	}
	res, _ := pub.p.Send(ctx, pub.chunk)
	for i, r := range res {
		var gone *types.QueueDoesNotExist
		if errors.As(r.Err, &gone) {
			// Found by a send (-max-size reads no attributes): told once,
			// as when the attributes cannot be read.
			pub.failed++
			pub.queueErr = queueReadError(pub.queue, r.Err)
			continue
		}
		if r.Err != nil {
			pub.fail(pub.chunkLine[i], r.Err.Error())
		} else {
			pub.sent++
		}
	}
	pub.chunk, pub.chunkLine = pub.chunk[:0], pub.chunkLine[:0]
}

func (pub *publisher) fail(n int, reason string) {
	pub.failed++
	fmt.Fprintf(pub.std.stderr, "lambdakit publish: line %d: %s\n", n, reason)
}

func (pub *publisher) counts() string {
	return fmt.Sprintf("%s: sent %d, duplicates in the input %d, failed %d", cmdline.Count(pub.lines, "line", "lines"), pub.sent, pub.duplicates, pub.failed)
}

// isJSONObject reports whether text is one valid JSON object.
func isJSONObject(text string) bool {
	t := strings.TrimLeft(text, " \t")
	return strings.HasPrefix(t, "{") && json.Valid([]byte(text))
}
