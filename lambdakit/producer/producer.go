package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// SQS's limits, as of 2025.
const (
	// DefaultMaxMessageSize is the largest message SQS accepts:
	// awsrules.MaxMessageBytes, 1 MiB, the ceiling of a queue's
	// MaximumMessageSize since SQS raised it from 256 KiB in 2025. A queue
	// may be set lower; NewFromQueue reads the queue's own value.
	DefaultMaxMessageSize = awsrules.MaxMessageBytes
	// MaxBatchBytes bounds the sum of the sizes of the messages of one
	// SendMessageBatch call.
	MaxBatchBytes = 1 << 20
	// MaxBatchEntries is the most entries one SendMessageBatch call takes.
	MaxBatchEntries = 10
)

// Client is the part of *sqs.Client the producer calls.
type Client interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// GroupFunc derives the MessageGroupId of a message from the message, as a
// lambdakit.KeyFunc derives its key.
type GroupFunc func(msg *events.SQSMessage) (string, error)

// GroupFromField returns a GroupFunc that reads the field at path in the
// JSON body, with the syntax and rules of lambdakit.KeyFromField.
func GroupFromField(path string) GroupFunc {
	return GroupFunc(lambdakit.KeyFromField(path))
}

// DedupID returns the MessageDeduplicationId of a message whose idempotency
// key is key: lambdakit.KeyHash(key), the hex SHA-256 of the key, 64
// characters. The consumer's idempotency record of the message has the ID
// lambdakit.RecordID(prefix, key), "<prefix>#" + DedupID(key).
func DedupID(key string) string { return lambdakit.KeyHash(key) }

// Message is one message to publish.
type Message struct {
	// Body is the message body: 1 or more characters that SQS allows
	// (XML's character set), sent byte for byte.
	Body string
	// Attributes are the message attributes, if any (at most 10). They
	// count towards the message's size, and the KeyFunc and GroupFunc see
	// them (lambdakit.KeyFromAttribute).
	Attributes map[string]types.MessageAttributeValue
}

// Size returns the message's size as SQS counts it against its limits:
// the body's bytes plus, for each attribute, the bytes of its name, data
// type and value.
func (m Message) Size() int {
	n := len(m.Body)
	for name, a := range m.Attributes {
		n += len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

// Result is the outcome of one message.
type Result struct {
	// Key is the idempotency key, when Options.Key is set and found it.
	Key string
	// DedupID is the MessageDeduplicationId sent (FIFO queues only).
	DedupID string
	// GroupID is the MessageGroupId sent, if any.
	GroupID string
	// Size is the message's size as SQS counts it (Message.Size).
	Size int
	// MessageID and SequenceNumber are what SQS answered for a sent
	// message. SequenceNumber is set on FIFO queues only.
	MessageID, SequenceNumber string
	// Attempts is how many SendMessageBatch calls carried the message.
	Attempts int
	// Err is nil when SQS accepted the message. Otherwise it says why the
	// message was not sent: refused before sending (no key, too large ...:
	// Attempts is 0), left out as a repeat of a key earlier in the call
	// (ErrDuplicate, ErrKeyConflict: Attempts is 0), rejected by SQS
	// (*EntryError), or the call failed.
	Err error
}

// Sent reports whether SQS accepted the message. A message left out as an
// ErrDuplicate is not sent: its earlier twin is.
func (r Result) Sent() bool { return r.Err == nil }

// Errors of New and of refused messages.
var (
	// ErrNoKeyFunc means a FIFO queue was given no Options.Key.
	ErrNoKeyFunc = errors.New("producer: a FIFO queue needs Options.Key, the consumer's KeyFunc, for deduplication IDs")
	// ErrNoGroupFunc means a FIFO queue was given no Options.Group.
	ErrNoGroupFunc = errors.New("producer: a FIFO queue needs Options.Group for message group IDs")
	// ErrEmptyKey means the KeyFunc returned an empty key for a FIFO queue.
	ErrEmptyKey = errors.New("producer: empty idempotency key")
	// ErrInvalidGroupID means a group ID breaks SQS's rule: 1 to 128
	// letters, digits and punctuation.
	ErrInvalidGroupID = errors.New("producer: message group ID must be 1 to 128 letters, digits and punctuation")
	// ErrInvalidBody means the body is empty, not UTF-8, or holds a
	// character SQS refuses.
	ErrInvalidBody = errors.New("producer: invalid message body")
	// ErrInvalidAttribute means a message attribute breaks SQS's rules.
	ErrInvalidAttribute = errors.New("producer: invalid message attribute")
	// ErrDuplicate leaves out a message of a FIFO Send whose key and
	// payload an earlier message of the same call carries: it would share
	// that message's deduplication ID, and SQS would accept it and deliver
	// only the earlier one. Nothing is lost (the earlier message's Result
	// says whether it went), so it alone does not make Send fail.
	ErrDuplicate = errors.New("producer: not sent: a duplicate (same key and payload) of an earlier message of the call")
	// ErrKeyConflict refuses a message of a FIFO Send whose key an earlier
	// message of the same call carries with a different payload (compared
	// by Options.Payload). Sent, it would share that message's
	// deduplication ID: SQS would accept it and silently never deliver it,
	// and had it arrived, the consumer would have failed it with
	// lambdakit.ErrPayloadMismatch. One of the two is wrong, and only the
	// caller knows which.
	ErrKeyConflict = errors.New("producer: not sent: an earlier message of the call has its idempotency key and a different payload")
	// ErrNoOutcome means SQS answered a call without naming the entry as
	// sent or failed. The message may or may not be on the queue.
	ErrNoOutcome = errors.New("producer: SQS's answer does not mention the message")
	// ErrFailed is what Send returns when at least one message was not
	// sent, other than an ErrDuplicate.
	ErrFailed = errors.New("producer: not every message was sent")
)

// TooLargeError refuses a message larger than the queue accepts.
type TooLargeError struct {
	Size int // the message's size (Message.Size)
	Max  int // Options.MaxMessageSize
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("producer: message is %d bytes; the queue accepts at most %d", e.Size, e.Max)
}

// EntryError is SQS's failure of one entry of a SendMessageBatch call.
type EntryError struct {
	Code, Message string
	// SenderFault is SQS's verdict: true means the entry is invalid and
	// was not retried.
	SenderFault bool
	// Attempts is how many calls carried the entry.
	Attempts int
}

// Error implements error.
func (e *EntryError) Error() string {
	what := "failed the message"
	if e.SenderFault {
		what = "rejected the message as invalid"
	}
	s := fmt.Sprintf("producer: SQS %s (%s: %s)", what, e.Code, e.Message)
	if e.Attempts > 1 {
		s += " after " + strconv.Itoa(e.Attempts) + " attempts"
	}
	return s
}

// Options configures a Producer. New fills in the defaults first, then
// applies the option functions; a zero field afterwards means its default.
type Options struct {
	// Key derives each message's idempotency key: pass the consumer's
	// KeyFunc. Required for FIFO queues, whose deduplication ID is
	// DedupID(key). Optional on standard queues, which take no
	// deduplication ID; Result.Key still reports the key.
	Key lambdakit.KeyFunc
	// Payload derives what must be the same in two messages with one key
	// for them to be one message: pass the consumer's
	// Options.Payload if it sets one. On a FIFO queue, a key
	// repeated within one Send is left out as an ErrDuplicate when the
	// payloads are equal, and refused with ErrKeyConflict when they are
	// not. Default lambdakit.PayloadBody, the consumer's default.
	Payload lambdakit.PayloadFunc
	// Group derives each message's MessageGroupId. Required for FIFO
	// queues. On a standard queue a group turns on fair queueing.
	Group GroupFunc
	// FIFO says whether the queue is a FIFO queue. New sets it from the
	// URL (a FIFO queue's name ends in ".fifo"), NewFromQueue from the
	// queue's FifoQueue attribute.
	FIFO bool
	// MaxMessageSize is the largest message, in bytes as Message.Size
	// counts them, that is sent; larger ones are refused with a
	// *TooLargeError. Default DefaultMaxMessageSize; NewFromQueue sets the
	// queue's MaximumMessageSize.
	MaxMessageSize int
	// MaxAttempts bounds the calls that carry one message, when SQS fails
	// it without blaming the sender. Default 3.
	MaxAttempts int
	// Backoff bounds the wait before the first retry; the bound doubles
	// with each attempt up to MaxBackoff, and each wait is drawn at random
	// up to its bound (full jitter). Defaults 100ms and 5s.
	Backoff, MaxBackoff time.Duration
	// Sleep waits d, or less when ctx ends (returning ctx's error).
	// Default: a timer. Tests may count the waits instead.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Producer publishes to one queue. It is safe for concurrent use.
type Producer struct {
	client   Client
	queueURL string
	opts     Options
}

// New returns a Producer for the queue at queueURL. It makes no call to
// SQS; a FIFO queue (URL ending in ".fifo") needs Options.Key and
// Options.Group, or New fails with ErrNoKeyFunc or ErrNoGroupFunc.
func New(client Client, queueURL string, optFns ...func(*Options)) (*Producer, error) {
	o := Options{FIFO: strings.HasSuffix(queueURL, ".fifo")}
	return newProducer(client, queueURL, o, optFns)
}

// NewFromQueue is New, but first reads the queue's FifoQueue and
// MaximumMessageSize attributes with one GetQueueAttributes call (which
// needs sqs:GetQueueAttributes), so that messages the queue would refuse
// are refused before sending. optFns may still override both.
func NewFromQueue(ctx context.Context, client Client, queueURL string, optFns ...func(*Options)) (*Producer, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameMaximumMessageSize},
	})
	if err != nil {
		return nil, fmt.Errorf("producer: reading the queue's attributes: %w", err)
	}
	o := Options{FIFO: out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"}
	if s, ok := out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("producer: the queue's MaximumMessageSize %q is not a size", s)
		}
		o.MaxMessageSize = n
	}
	return newProducer(client, queueURL, o, optFns)
}

func newProducer(client Client, queueURL string, o Options, optFns []func(*Options)) (*Producer, error) {
	for _, fn := range optFns {
		fn(&o)
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Payload == nil {
		o.Payload = lambdakit.PayloadBody
	}
	if o.FIFO && o.Key == nil {
		return nil, ErrNoKeyFunc
	}
	if o.FIFO && o.Group == nil {
		return nil, ErrNoGroupFunc
	}
	return &Producer{client: client, queueURL: queueURL, opts: o}, nil
}

// FIFO reports whether the producer treats its queue as a FIFO queue.
func (p *Producer) FIFO() bool { return p.opts.FIFO }

// MaxMessageSize is the size above which messages are refused.
func (p *Producer) MaxMessageSize() int { return p.opts.MaxMessageSize }

// Check derives msg's key, deduplication ID and group ID and checks msg
// against SQS's rules, as Send does before sending, without sending it:
// Err is set when Send would refuse the message. It sees the message
// alone: a key repeated within one call (ErrDuplicate, ErrKeyConflict) is
// for Send to find.
func (p *Producer) Check(msg Message) Result {
	r := Result{Size: msg.Size()}
	if r.Err = checkContent(msg); r.Err != nil {
		return r
	}
	// The functions see the message as the consumer will.
	ev := eventOf(msg)
	if p.opts.Key != nil {
		key, err := p.opts.Key(ev)
		switch {
		case err != nil:
			r.Err = fmt.Errorf("producer: idempotency key: %w", err)
			return r
		case key == "" && p.opts.FIFO:
			r.Err = ErrEmptyKey
			return r
		}
		r.Key = key
		if p.opts.FIFO {
			r.DedupID = DedupID(key)
		}
	}
	if p.opts.Group != nil {
		g, err := p.opts.Group(ev)
		if err != nil {
			r.Err = fmt.Errorf("producer: message group: %w", err)
			return r
		}
		if r.Err = checkGroupID(g); r.Err != nil {
			return r
		}
		r.GroupID = g
	}
	r.Err = checkSize(r.Size, p.opts.MaxMessageSize)
	return r
}

// CheckWith checks msg against SQS's rules as Check does, for a message
// whose group ID is known rather than derived by Options.Group: group,
// "" for none, which a FIFO queue (fifo) refuses. It derives no key (Key
// and DedupID stay empty) and builds nothing to hand a KeyFunc: for code
// that checks messages it will send later, on every record, such as an
// outbox. maxSize is the largest Size taken (SQS's is
// DefaultMaxMessageSize).
func CheckWith(msg Message, fifo bool, group string, maxSize int) Result {
	return checkKnownGroup(Result{Size: msg.Size()}, checkContent(msg), fifo, group, maxSize)
}

// CheckStrings is CheckWith for a message whose attributes are all of
// data type String, given as name → value, as an outbox keeps them. It
// checks them where they are: building the SDK's attribute map for each
// check would cost a map and a value for every attribute, on every
// record.
func CheckStrings(body string, attrs map[string]string, fifo bool, group string, maxSize int) Result {
	size, err := checkStringAttributes(attrs)
	if err == nil {
		err = checkBody(body)
	}
	return checkKnownGroup(Result{Size: len(body) + size}, err, fifo, group, maxSize)
}

// checkKnownGroup is the rest of CheckWith and CheckStrings for r, whose
// content check gave contentErr.
func checkKnownGroup(r Result, contentErr error, fifo bool, group string, maxSize int) Result {
	if r.Err = contentErr; r.Err != nil {
		return r
	}
	if group != "" || fifo {
		if r.Err = checkGroupID(group); r.Err != nil {
			return r
		}
		r.GroupID = group
	}
	r.Err = checkSize(r.Size, maxSize)
	return r
}

// checkContent checks msg's attributes and body: what SQS requires of
// every message, whatever its queue.
func checkContent(msg Message) error {
	if err := checkAttributes(msg.Attributes); err != nil {
		return err
	}
	return checkBody(msg.Body)
}

// checkBody checks a message body as SQS does.
func checkBody(body string) error {
	if body == "" {
		return fmt.Errorf("%w: empty", ErrInvalidBody)
	}
	if err := awsrules.CheckText(body); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	return nil
}

// checkGroupID checks a message group ID as SQS does.
func checkGroupID(g string) error {
	if err := awsrules.CheckGroupID(g); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidGroupID, err)
	}
	return nil
}

// checkSize refuses a message of size bytes larger than max.
func checkSize(size, max int) error {
	if size > max {
		return &TooLargeError{Size: size, Max: max}
	}
	return nil
}

// entry is the batch entry, without an Id, of msg, which Check passed as
// r: built only for a message to send, so that Check alone (the outbox
// checks each message twice per record) makes none of its strings.
func (p *Producer) entry(msg Message, r Result) types.SendMessageBatchRequestEntry {
	entry := types.SendMessageBatchRequestEntry{MessageBody: aws.String(msg.Body), MessageAttributes: msg.Attributes}
	if r.DedupID != "" {
		entry.MessageDeduplicationId = aws.String(r.DedupID)
	}
	if p.opts.Group != nil {
		entry.MessageGroupId = aws.String(r.GroupID)
	}
	return entry
}

// Send publishes msgs in order and returns one Result per message, in the
// same order. The error is nil when every message was sent or left out as
// an ErrDuplicate; otherwise it wraps ErrFailed, and the Results say which
// messages failed and why.
//
// On a FIFO queue, a message whose key an earlier message of msgs carries
// (one that passed the checks) is not sent, because SQS would drop it by
// its deduplication ID while answering that it was sent: it is left out
// with ErrDuplicate when its payload is the earlier one's, and refused
// with ErrKeyConflict when it is not.
//
// On a FIFO queue, while a message waits to be sent again, the later
// messages of its group that were not yet sent wait with it, so that they
// stay behind it. Messages of its group that SQS accepted in the same call
// are not undone: the retry lands after them. A message that fails for
// good holds nothing back; sent again later, it lands after the rest of
// its group.
func (p *Producer) Send(ctx context.Context, msgs []Message) ([]Result, error) {
	results := make([]Result, len(msgs))
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	pending := make([]int, 0, len(msgs))
	for i, m := range msgs {
		results[i] = p.Check(m)
		if results[i].Err == nil {
			entries[i] = p.entry(m, results[i])
			pending = append(pending, i)
		}
	}
	if p.opts.FIFO {
		pending = p.leaveOutRepeats(msgs, results, pending)
	}
	s := &sending{p: p, results: results, entries: entries}
	for round := 0; len(pending) > 0; round++ {
		if round > 0 {
			if err := p.opts.Sleep(ctx, p.backoff(s.mostAttempts(pending))); err != nil {
				s.abandon(pending, err)
				break
			}
		}
		pending = s.round(ctx, pending)
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil && !errors.Is(r.Err, ErrDuplicate) {
			failed++
		}
	}
	if failed > 0 {
		return results, fmt.Errorf("%w: %d of %d failed", ErrFailed, failed, len(msgs))
	}
	return results, nil
}

// leaveOutRepeats returns pending without the messages whose deduplication
// ID an earlier message of pending carries, and sets their Err. Only
// pending messages count as earlier ones: a refused message never reaches
// SQS, so its key is free for a later message. The payloads are computed
// only for repeated keys, the first message's once.
func (p *Producer) leaveOutRepeats(msgs []Message, results []Result, pending []int) []int {
	first := make(map[string]int, len(pending))
	type payload struct {
		v   string
		err error
	}
	firstPayload := map[int]payload{}
	payloadOf := func(i int) (string, error) { return p.opts.Payload(eventOf(msgs[i])) }
	kept := pending[:0]
	for _, i := range pending {
		j, seen := first[results[i].DedupID]
		if !seen {
			first[results[i].DedupID] = i
			kept = append(kept, i)
			continue
		}
		fp, ok := firstPayload[j]
		if !ok {
			fp.v, fp.err = payloadOf(j)
			firstPayload[j] = fp
		}
		v, err := payloadOf(i)
		switch {
		case fp.err != nil || err != nil:
			// The consumer could not compare them either: not a
			// duplicate it would skip.
			results[i].Err = fmt.Errorf("%w (message %d): comparing the payloads: %w", ErrKeyConflict, j, cmp.Or(fp.err, err))
		case v == fp.v:
			results[i].Err = fmt.Errorf("%w (message %d)", ErrDuplicate, j)
		default:
			results[i].Err = fmt.Errorf("%w (message %d)", ErrKeyConflict, j)
		}
	}
	return kept
}

// sending is the state of one Send.
type sending struct {
	p       *Producer
	results []Result
	entries []types.SendMessageBatchRequestEntry
}

// round sends pending (indices, in order) once, in batches, and returns
// what must go again, in order.
func (s *sending) round(ctx context.Context, pending []int) (next []int) {
	// FIFO groups with a message to retry: their later messages wait.
	blocked := map[string]bool{}
	batch := make([]int, 0, MaxBatchEntries)
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			s.abandon(pending, err)
			break
		}
		batch = batch[:0]
		bytes, taken := 0, len(pending)
		for j, i := range pending {
			if s.p.opts.FIFO && blocked[s.results[i].GroupID] {
				next = append(next, i)
				continue
			}
			// A message larger than a whole batch still goes, alone.
			size := s.results[i].Size
			if len(batch) == MaxBatchEntries || (len(batch) > 0 && bytes+size > MaxBatchBytes) {
				taken = j
				break
			}
			batch = append(batch, i)
			bytes += size
		}
		pending = pending[taken:]
		if len(batch) == 0 {
			break
		}
		for _, i := range s.send(ctx, batch) {
			next = append(next, i)
			blocked[s.results[i].GroupID] = true
		}
	}
	slices.Sort(next)
	return next
}

// send makes one SendMessageBatch call and records its outcome; it returns
// the messages to retry.
func (s *sending) send(ctx context.Context, batch []int) (retry []int) {
	in := &sqs.SendMessageBatchInput{
		QueueUrl: aws.String(s.p.queueURL),
		Entries:  make([]types.SendMessageBatchRequestEntry, len(batch)),
	}
	for j, i := range batch {
		in.Entries[j] = s.entries[i]
		in.Entries[j].Id = aws.String(strconv.Itoa(j))
		s.results[i].Attempts++
	}
	out, err := s.p.client.SendMessageBatch(ctx, in, WithTraceHeader(ctx))
	if err != nil {
		err = fmt.Errorf("producer: SendMessageBatch: %w", err)
		for _, i := range batch {
			s.results[i].Err = err
		}
		return nil
	}
	answered := make([]bool, len(batch))
	entryOf := func(id *string) (int, bool) {
		j, err := strconv.Atoi(aws.ToString(id))
		if err != nil || j < 0 || j >= len(batch) || answered[j] {
			return 0, false
		}
		answered[j] = true
		return batch[j], true
	}
	for _, ok := range out.Successful {
		i, found := entryOf(ok.Id)
		if !found {
			continue
		}
		r := &s.results[i]
		r.MessageID, r.SequenceNumber, r.Err = aws.ToString(ok.MessageId), aws.ToString(ok.SequenceNumber), nil
	}
	for _, f := range out.Failed {
		i, found := entryOf(f.Id)
		if !found {
			continue
		}
		r := &s.results[i]
		r.Err = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault, Attempts: r.Attempts}
		if !f.SenderFault && r.Attempts < s.p.opts.MaxAttempts {
			retry = append(retry, i)
		}
	}
	for j, i := range batch {
		if !answered[j] {
			s.results[i].Err = ErrNoOutcome
		}
	}
	return retry
}

// abandon fails the messages that will not be sent because ctx ended. A
// message that already failed keeps that failure.
func (s *sending) abandon(idx []int, err error) {
	for _, i := range idx {
		if s.results[i].Err == nil {
			s.results[i].Err = fmt.Errorf("producer: not sent: %w", err)
		}
	}
}

func (s *sending) mostAttempts(idx []int) int {
	n := 0
	for _, i := range idx {
		n = max(n, s.results[i].Attempts)
	}
	return n
}

// backoff draws the wait before the next attempt of a message tried
// attempts times.
func (p *Producer) backoff(attempts int) time.Duration {
	bound := p.opts.Backoff
	for k := 1; k < attempts && bound < p.opts.MaxBackoff; k++ {
		bound *= 2
	}
	bound = min(bound, p.opts.MaxBackoff)
	return rand.N(bound + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkAttributes applies the rules SQS applies to each message alone, so
// that one bad message does not fail the whole call it would share.
func checkAttributes(attrs map[string]types.MessageAttributeValue) error {
	if len(attrs) > awsrules.MaxMessageAttributes {
		return fmt.Errorf("%w: %d attributes; at most %d", ErrInvalidAttribute, len(attrs), awsrules.MaxMessageAttributes)
	}
	for name, a := range attrs {
		if err := checkAttribute(name, aws.ToString(a.DataType), aws.ToString(a.StringValue), a.BinaryValue); err != nil {
			return err
		}
	}
	return nil
}

// checkStringAttributes checks attributes of data type String, name →
// value, as checkAttributes checks them, and returns their size as
// Message.Size counts it, whether they pass or not.
func checkStringAttributes(attrs map[string]string) (size int, err error) {
	for name, v := range attrs {
		size += len(name) + len(stringType) + len(v)
	}
	if len(attrs) > awsrules.MaxMessageAttributes {
		return size, fmt.Errorf("%w: %d attributes; at most %d", ErrInvalidAttribute, len(attrs), awsrules.MaxMessageAttributes)
	}
	for name, v := range attrs {
		if err := checkAttribute(name, stringType, v, nil); err != nil {
			return size, err
		}
	}
	return size, nil
}

// stringType is the data type of a String attribute.
const stringType = "String"

// checkAttribute checks the attribute name of data type dt, whose value
// is str or bin.
func checkAttribute(name, dt, str string, bin []byte) error {
	if err := awsrules.CheckAttributeName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidAttribute, err)
	}
	base, _, _ := strings.Cut(dt, ".")
	switch {
	case base == "String" || base == "Number":
		if str == "" {
			return fmt.Errorf("%w: %q of type %s has no StringValue", ErrInvalidAttribute, name, dt)
		}
		check := awsrules.CheckText
		if base == "Number" {
			check = awsrules.CheckNumberAttribute
		}
		if err := check(str); err != nil {
			return fmt.Errorf("%w: %q: %w", ErrInvalidAttribute, name, err)
		}
	case base == "Binary":
		if len(bin) == 0 {
			return fmt.Errorf("%w: %q of type %s has no BinaryValue", ErrInvalidAttribute, name, dt)
		}
	default:
		return fmt.Errorf("%w: %q has data type %q; want String, Number or Binary", ErrInvalidAttribute, name, dt)
	}
	return nil
}

// eventOf is msg as the consumer's KeyFunc and PayloadFunc will see it.
func eventOf(msg Message) *events.SQSMessage {
	return &events.SQSMessage{Body: msg.Body, MessageAttributes: eventAttributes(msg.Attributes)}
}

// eventAttributes converts message attributes to what a consumer's
// KeyFunc sees.
func eventAttributes(attrs map[string]types.MessageAttributeValue) map[string]events.SQSMessageAttribute {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]events.SQSMessageAttribute, len(attrs))
	for name, a := range attrs {
		out[name] = events.SQSMessageAttribute{StringValue: a.StringValue, BinaryValue: a.BinaryValue, DataType: aws.ToString(a.DataType)}
	}
	return out
}
