package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

const publishUsage = `Usage: lambdakit publish [flags] [FILE]

Sends each line of FILE (standard input when FILE is absent or "-") to the
SQS queue -queue as one message, the line's bytes as its body. Each line must
be a JSON object; blank lines are ignored. Flags come before FILE.

A FIFO queue (its URL ends in ".fifo") needs -key-field and -group-field.
The key is found as lambdakit.KeyFromField finds it in the consumer, and the
message's deduplication ID is the hex SHA-256 of the key: the ID of the
consumer's idempotency record for the message is "<prefix>#<deduplication ID>".
The group ID is the value of -group-field. On a standard queue both flags are
optional; there, the key sends no deduplication ID but still finds duplicates
in the input, and a group turns on fair queueing.

SQS drops a FIFO message whose deduplication ID it has seen in the last 5
minutes, and still answers that it was sent. That covers the moment of
publishing only: redeliveries, redrives and later retries are caught by the
consumer's idempotency records.

A line that is not a JSON object, lacks the key or group field, is larger
than the queue accepts, or has characters SQS refuses is reported with its
line number and skipped; the rest are still sent. A line with the key of an
earlier line is a duplicate within the input and is not sent again; if its
body differs from the earlier line's, it is reported as a failure and not
sent, since one key stands for one body.

Messages go in SendMessageBatch calls of up to 10 entries and 1 MiB. Entries
that SQS fails on its side are sent again, up to 3 times in all, after a
backoff with jitter; entries it rejects as invalid are not. Unless -max-size
is given, the queue's FifoQueue and MaximumMessageSize attributes are read
first (this needs sqs:GetQueueAttributes). The endpoint, region and
credentials come from the AWS SDK's usual sources: AWS_ENDPOINT_URL_SQS or
AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE and so on.

Standard error gets a line for each line skipped, duplicated or failed,
progress every 1000 lines, and a closing summary:
  lambdakit publish: N lines: sent S, duplicates in the input D, failed F
Standard output gets nothing.

Flags:
`

const publishExitStatus = `
Exit status:
  0    every valid line was sent (a duplicate of a sent line counts as sent)
  1    a line was skipped or failed to send, or the queue could not be read
  2    usage error, or FILE cannot be opened or read
  130  interrupted
`

// Publishing sends this many messages per Send, so that a long input is
// read, sent and reported as it goes.
const (
	publishChunk    = 100
	publishProgress = 1000
)

type publishFlags struct {
	queue      string
	keyField   string
	groupField string
	maxSize    int
	file       string
}

func parsePublishFlags(std stdio, args []string) (*publishFlags, int) {
	f := &publishFlags{}
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(std.stderr)
	fs.StringVar(&f.queue, "queue", "", "the queue's `URL` (required)")
	fs.StringVar(&f.keyField, "key-field", "", "the JSON `path` of the idempotency key (\"payment_id\", \"order.id\"), as the consumer's lambdakit.KeyFromField; required for FIFO queues")
	fs.StringVar(&f.groupField, "group-field", "", "the JSON `path` of the message group ID; required for FIFO queues")
	fs.IntVar(&f.maxSize, "max-size", 0, "refuse lines over this many `bytes`, and do not read the queue's attributes (default: the queue's MaximumMessageSize)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), publishUsage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), publishExitStatus)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage // flag has printed the error and the usage
	}
	fail := func(format string, args ...any) (*publishFlags, int) {
		fmt.Fprintf(std.stderr, "lambdakit publish: "+format+"\nRun 'lambdakit publish -h' for usage.\n", args...)
		return nil, exitUsage
	}
	switch fs.NArg() {
	case 0:
		f.file = "-"
	case 1:
		f.file = fs.Arg(0)
	default:
		return fail("one FILE at most, and flags before it; got %q", fs.Args())
	}
	if f.queue == "" {
		return fail("-queue is required")
	}
	if u, err := url.Parse(f.queue); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return fail("-queue %q: want a queue URL, such as https://sqs.us-east-1.amazonaws.com/123456789012/payments.fifo", f.queue)
	}
	if strings.HasSuffix(f.queue, ".fifo") && (f.keyField == "" || f.groupField == "") {
		return fail("-queue is a FIFO queue: -key-field and -group-field are required")
	}
	for name, path := range map[string]string{"-key-field": f.keyField, "-group-field": f.groupField} {
		if path != "" && slicesContainsEmpty(strings.Split(path, ".")) {
			return fail("%s %q: want field names separated by single dots", name, path)
		}
	}
	if f.maxSize < 0 {
		return fail("-max-size %d: want a positive number of bytes", f.maxSize)
	}
	return f, exitOK
}

func slicesContainsEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

func runPublish(ctx context.Context, std stdio, args []string) int {
	f, code := parsePublishFlags(std, args)
	if f == nil {
		return code
	}
	in := std.stdin
	if f.file != "-" {
		file, err := os.Open(f.file)
		if err != nil {
			fmt.Fprintf(std.stderr, "lambdakit publish: %v\n", err)
			return exitUsage
		}
		defer file.Close()
		in = file
	}
	p, code := newPublishProducer(ctx, std, f)
	if p == nil {
		return code
	}
	pub := &publisher{std: std, p: p, hasKey: f.keyField != "", seen: map[[sha256.Size]byte]seenLine{}}
	err := pub.run(ctx, in)
	fmt.Fprintf(std.stderr, "lambdakit publish: %s\n", pub.counts())
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(std.stderr, "lambdakit publish: interrupted")
		return exitInterrupted
	case err != nil:
		fmt.Fprintf(std.stderr, "lambdakit publish: reading input: %v\n", err)
		return exitUsage
	case pub.failed > 0:
		return exitFailed
	}
	return exitOK
}

// newPublishProducer builds the producer, reading the queue's attributes
// unless -max-size was given.
func newPublishProducer(ctx context.Context, std stdio, f *publishFlags) (*producer.Producer, int) {
	// The SDK reads the process environment itself: AWS_ENDPOINT_URL_SQS,
	// AWS_REGION, credentials.
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Fprintf(std.stderr, "lambdakit publish: AWS configuration: %v\n", err)
		return nil, exitFailed
	}
	client := sqs.NewFromConfig(cfg)
	opts := func(o *producer.Options) {
		if f.keyField != "" {
			o.Key = lambdakit.KeyFromField(f.keyField)
		}
		if f.groupField != "" {
			o.Group = producer.GroupFromField(f.groupField)
		}
		if f.maxSize > 0 {
			o.MaxMessageSize = f.maxSize
		}
	}
	var p *producer.Producer
	if f.maxSize > 0 {
		p, err = producer.New(client, f.queue, opts)
	} else {
		p, err = producer.NewFromQueue(ctx, client, f.queue, opts)
	}
	switch {
	case errors.Is(err, producer.ErrNoKeyFunc), errors.Is(err, producer.ErrNoGroupFunc):
		fmt.Fprintf(std.stderr, "lambdakit publish: the queue is a FIFO queue: -key-field and -group-field are required\n")
		return nil, exitUsage
	case ctx.Err() != nil:
		return nil, exitInterrupted
	case err != nil:
		fmt.Fprintf(std.stderr, "lambdakit publish: %v\n", err)
		return nil, exitFailed
	}
	return p, exitOK
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
	hasKey bool                           // a key was asked for: duplicates in the input are found
	seen   map[[sha256.Size]byte]seenLine // by the key's hash

	lines, sent, duplicates, failed int

	chunk     []producer.Message
	chunkLine []int
}

func (pub *publisher) run(ctx context.Context, in io.Reader) error {
	// Lines are read on their own goroutine, so that an interrupt is not
	// stuck behind a read from a terminal or a pipe that stays open.
	lines := make(chan inputLine, publishChunk)
	errc := make(chan error, 1)
	go func() { errc <- readLines(ctx, in, lines) }()
	for {
		var l inputLine
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
		pub.lines++
		pub.add(ctx, l.n, l.text)
		if pub.lines%publishProgress == 0 {
			// Sent first, so that the counts are exact.
			pub.flush(ctx)
			fmt.Fprintf(pub.std.stderr, "lambdakit publish: progress: %s\n", pub.counts())
		}
	}
}

// inputLine is a line that is not blank, without its line ending.
type inputLine struct {
	n    int
	text string
}

// readLines sends the lines of in that are not blank on out, and closes
// it at the end of in or when ctx ends.
func readLines(ctx context.Context, in io.Reader, out chan<- inputLine) error {
	defer close(out)
	r := bufio.NewReaderSize(in, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if text := strings.TrimRight(line, "\r\n"); strings.TrimSpace(text) != "" {
			select {
			case out <- inputLine{n, text}:
			case <-ctx.Done():
				return nil
			}
		}
		if err != nil { // io.EOF
			return nil
		}
	}
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
			fmt.Fprintf(pub.std.stderr, "lambdakit publish: line %d: duplicate of line %d (key %q): sent once\n", n, first.line, r.Key)
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
	return fmt.Sprintf("%d lines: sent %d, duplicates in the input %d, failed %d", pub.lines, pub.sent, pub.duplicates, pub.failed)
}

// isJSONObject reports whether text is one valid JSON object.
func isJSONObject(text string) bool {
	t := strings.TrimLeft(text, " \t")
	return strings.HasPrefix(t, "{") && json.Valid([]byte(text))
}
