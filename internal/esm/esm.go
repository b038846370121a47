package esm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// Client is the part of the SQS API an event source mapping calls.
// *sqs.Client implements it.
type Client interface {
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// Invoker runs one event through the function. *runtimeapi.Runner and Pool
// implement it. Function failures are reported in the Result; an error means
// the invocation could not be run at all, and stops Run. An Invoker that
// serves a fixed number of invocations at once says how many with a
// Capacity method (a Runner: one; a Pool: its size).
type Invoker interface {
	Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error)
}

// Limits and defaults, Lambda's where Lambda has one.
const (
	// DefaultBatchSize is BatchSize's default, as on Lambda.
	DefaultBatchSize = 10
	// MaxBatchSizeFIFO is the largest batch from a FIFO queue.
	MaxBatchSizeFIFO = 10
	// MaxBatchSize is the largest batch from a standard queue; above 10 it
	// needs a Window of at least a second.
	MaxBatchSize = 10000
	// MaxWindow is the longest batching window, 300 seconds.
	MaxWindow = 5 * time.Minute
	// MaxPayload is Lambda's limit on a synchronous invocation's event, 6 MB.
	MaxPayload = 6 * 1024 * 1024
	// DefaultPollWait is how long one ReceiveMessage waits for messages.
	DefaultPollWait = 2 * time.Second
	// MaxPollWait is SQS's longest long poll.
	MaxPollWait = 20 * time.Second
	// MinConcurrency and MaxConcurrency bound ScalingConfig's
	// MaximumConcurrency, as Lambda does.
	MinConcurrency = 2
	MaxConcurrency = 1000
	// DefaultConcurrency is how many batches Lambda starts with on a queue
	// whose mapping sets no MaximumConcurrency: five. Lambda then scales
	// with the backlog; Run does not (see Options.Concurrency).
	DefaultConcurrency = 5
	// RecommendedVisibilityFactor is how many times the function's timeout
	// AWS recommends a mapped queue's visibility timeout to be, at least.
	RecommendedVisibilityFactor = 6
)

// How Run copes with SQS errors: the SDK has retried each call already, so
// a few consecutive failures mean the queue is out of reach.
const (
	maxConsecutiveErrors = 5
	errorPause           = time.Second
	idlePause            = 200 * time.Millisecond // between short polls that found nothing
	callTimeout          = 30 * time.Second       // bound on one SQS call, beyond its long poll
)

// Options configures a Mapping. New starts from the defaults and applies the
// option functions; a zero BatchSize, Concurrency, PollWait or MaxPayload then
// means its default too.
type Options struct {
	// BatchSize is the most records per invocation (BatchSize). Default 10.
	BatchSize int
	// Window is how long to gather records before invoking, on a standard
	// queue (MaximumBatchingWindowInSeconds): whole seconds, 0 to 300.
	// Default 0: invoke with what one receive returns. FIFO queues take no
	// window.
	Window time.Duration
	// Concurrency is the most batches in flight at once
	// (ScalingConfig.MaximumConcurrency): 2 to 1000, as Lambda takes it.
	// Default DefaultConcurrency, the five batches Lambda starts with when
	// no maximum is set; Run keeps to it, where Lambda would scale up with
	// the backlog. Batches run in parallel only if the Invoker serves
	// invocations in parallel (see Pool): Run polls with no more pollers
	// than its Capacity, since on Lambda each batch in flight has an
	// execution environment of its own, and a batch received must not wait
	// for one while its visibility timeout runs.
	Concurrency int
	// ReportBatchItemFailures reads the response as a partial batch response
	// (FunctionResponseTypes: [ReportBatchItemFailures]). Default false, as
	// on Lambda, where FunctionResponseTypes has no default: every
	// successful invocation deletes its whole batch, whatever the response
	// says, and Run warns once (OnWarning) when a response names
	// batchItemFailures that are so ignored.
	ReportBatchItemFailures bool
	// UntilEmpty stops Run once a receive finds nothing and the queue reports
	// no visible, in-flight or delayed messages.
	UntilEmpty bool
	// PollWait is each ReceiveMessage's long poll (WaitTimeSeconds, in whole
	// seconds), and so the longest Run takes to notice that its context
	// ended. Default 2s; at most 20s. Set it negative for short polls.
	PollWait time.Duration
	// MaxPayload is the largest event in bytes. Default MaxPayload, 6 MB.
	MaxPayload int
	// OnBatch, if set, is called after each batch is settled, one call at a
	// time.
	OnBatch func(BatchResult)
	// OnWaiting, if set, is told, with UntilEmpty, when a receive finds
	// nothing, no batch is in flight, and the queue still holds hidden
	// messages: messages left for redelivery that wait out their
	// visibility timeout, the queue's or one the function set (as
	// lambdakit.Backoff does). It is called once per such stretch, with
	// how many are hidden, so that a caller can say the run is waiting
	// rather than stuck.
	OnWaiting func(hidden int)
	// OnWarning, if set, is told of errors Run recovers from (a failed
	// receive that is retried, a failed delete), one call at a time; of a
	// queue whose visibility timeout is below RecommendedVisibilityFactor
	// times FunctionTimeout; and, once, of batchItemFailures ignored.
	OnWarning func(error)
	// FunctionTimeout is the function's timeout, if known. Lambda refuses
	// to map a queue whose visibility timeout is shorter (a batch still
	// running when it ends would be handed out again, a duplicate that
	// cannot happen on AWS), and so does Run: it returns an OptionError
	// about FunctionTimeout when it reads the queue's attributes.
	FunctionTimeout time.Duration
	// AllowShortVisibilityTimeout lets Run map a queue whose visibility
	// timeout is shorter than FunctionTimeout, with a warning: for a test
	// that wants a batch handed out again while it runs, on purpose.
	AllowShortVisibilityTimeout bool
	// Filter is the mapping's FilterCriteria. A record that none of its
	// patterns match is deleted without an invocation, as Lambda deletes
	// it; nil lets every record through.
	Filter *eventfilter.Filter
}

// Errors a BatchResult or Run can carry.
var (
	// ErrInvalidOptions is what every OptionError is.
	ErrInvalidOptions = errors.New("esm: invalid options")
	// ErrInvocationFailed means the invocation failed as a whole (function
	// error, init error, crash or timeout): the whole batch stays.
	ErrInvocationFailed = errors.New("esm: the invocation failed")
	// ErrNotInvoked marks FIFO records that were held back, without an
	// invocation, because an earlier part of the same receive left a record
	// of their group (only when a batch is cut at the payload limit).
	ErrNotInvoked = errors.New("esm: not invoked after an earlier failure in the FIFO group")
	// ErrDelete means DeleteMessageBatch did not delete some records; they
	// will come back.
	ErrDelete = errors.New("esm: delete failed")
	// ErrQueue means the queue could not be read.
	ErrQueue = errors.New("esm: queue")
)

// OptionError is New's complaint about an option, which errors.Is reports
// as ErrInvalidOptions.
type OptionError struct {
	// Option names the Options field, or "queueURL".
	Option string
	// Reason starts with the value and says what is wrong with it.
	Reason string
}

func (e *OptionError) Error() string { return "esm: invalid option " + e.Option + " " + e.Reason }

// Is makes an OptionError match ErrInvalidOptions.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// BatchResult is what became of one batch.
type BatchResult struct {
	// Records are the batch's records, as the function got them.
	Records []events.SQSMessage
	// Result is the invocation's result; its Outcome is OutcomeNone for
	// records not invoked (Err is ErrNotInvoked).
	Result runtimeapi.Result
	// Failed are the message IDs the function named in batchItemFailures,
	// once each, when its response was honoured.
	Failed []string
	// Deleted are the message IDs deleted from the queue.
	Deleted []string
	// Left are the message IDs left in the queue, to come back after the
	// visibility timeout.
	Left []string
	// Err says why the whole batch was left: it wraps ErrInvocationFailed,
	// ErrInvalidResponse or ErrNotInvoked. Nil when the response was
	// honoured.
	Err error
	// DeleteErr, wrapping ErrDelete, says which deletions failed.
	DeleteErr error
	// ToDeadLetterQueue is how many of the Left records had been received
	// maxReceiveCount times: SQS moves them to the dead-letter queue.
	ToDeadLetterQueue int
}

// Summary counts what a Run did.
type Summary struct {
	// Invocations is how many times the function was invoked.
	Invocations int
	// Records is how many records were received, each time they were.
	Records int
	// Deleted is how many records were deleted after the function succeeded
	// with them.
	Deleted int
	// Left is how many records were left in the queue for redelivery:
	// Records = Filtered + Deleted + Left.
	Left int
	// Filtered is how many records matched no pattern of Options.Filter
	// and were deleted without an invocation (one whose deletion failed is
	// counted in Left and DeleteFailures instead).
	Filtered int
	// ToDeadLetterQueue is how many of the Left records had been received
	// maxReceiveCount times (the queue's RedrivePolicy): SQS moves them to
	// the dead-letter queue instead of delivering them again.
	ToDeadLetterQueue int
	// FunctionErrors is how many invocations failed as a whole: function
	// error, init error, crash or timeout.
	FunctionErrors int
	// InvalidResponses is how many successful invocations answered with a
	// response that fails the whole batch.
	InvalidResponses int
	// ItemFailures is how many records functions named in batchItemFailures.
	ItemFailures int
	// NotInvoked is how many FIFO records were held back (see ErrNotInvoked).
	NotInvoked int
	// DeleteFailures is how many records could not be deleted.
	DeleteFailures int
	// Delayed is how many records left for redelivery came back later
	// than the queue's visibility timeout would have brought them back
	// (by more than PollWait and a second): the function delayed them
	// with a visibility change of its own, as lambdakit.Backoff does.
	Delayed int
	// Empty reports that Run stopped because the queue was empty.
	Empty bool
}

// Mapping is an event source mapping from one queue to one function. Run
// may be called again once it returned, not concurrently.
type Mapping struct {
	client   Client
	queueURL string
	invoker  Invoker
	opts     Options
}

// New returns a Mapping from the queue at queueURL to the function behind
// invoker. It checks the options against Lambda's rules, telling a FIFO
// queue by its URL (a FIFO queue's name ends in .fifo); it makes no call.
func New(client Client, queueURL string, invoker Invoker, optFns ...func(*Options)) (*Mapping, error) {
	o := Options{
		BatchSize:   DefaultBatchSize,
		Concurrency: DefaultConcurrency,
		PollWait:    DefaultPollWait,
		MaxPayload:  MaxPayload,
	}
	for _, fn := range optFns {
		fn(&o)
	}
	if client == nil || invoker == nil {
		return nil, fmt.Errorf("%w: need an SQS client and an invoker", ErrInvalidOptions)
	}
	u, err := url.Parse(queueURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return nil, &OptionError{"queueURL", fmt.Sprintf("%q: want http(s)://host/account/name", queueURL)}
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.PollWait == 0 {
		o.PollWait = DefaultPollWait
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = MaxPayload
	}
	if err := check(o, strings.HasSuffix(u.Path, ".fifo")); err != nil {
		return nil, err
	}
	return &Mapping{client: client, queueURL: queueURL, invoker: invoker, opts: o}, nil
}

// check applies Lambda's rules on the options to the queue's type.
func check(o Options, fifo bool) error {
	bad := func(option string, format string, args ...any) error {
		return &OptionError{option, fmt.Sprintf(format, args...)}
	}
	switch {
	case fifo && (o.BatchSize < 1 || o.BatchSize > MaxBatchSizeFIFO):
		return bad("BatchSize", "%d: a FIFO queue takes 1 to %d", o.BatchSize, MaxBatchSizeFIFO)
	case o.BatchSize < 1 || o.BatchSize > MaxBatchSize:
		return bad("BatchSize", "%d: a standard queue takes 1 to %d", o.BatchSize, MaxBatchSize)
	case fifo && o.Window != 0:
		return bad("Window", "%v: FIFO queues take no batching window", o.Window)
	case o.Window < 0 || o.Window > MaxWindow || o.Window%time.Second != 0:
		return bad("Window", "%v: want whole seconds, 0 to %v", o.Window, MaxWindow)
	case o.BatchSize > 10 && o.Window < time.Second:
		return bad("BatchSize", "%d: above 10 records a batch needs a batching window of at least 1s", o.BatchSize)
	case o.Concurrency < MinConcurrency || o.Concurrency > MaxConcurrency:
		return bad("Concurrency", "%d: want %d to %d", o.Concurrency, MinConcurrency, MaxConcurrency)
	case o.PollWait > MaxPollWait:
		return bad("PollWait", "%v: SQS waits at most %v", o.PollWait, MaxPollWait)
	case o.MaxPayload < 0:
		return bad("MaxPayload", "%d bytes is negative", o.MaxPayload)
	}
	return nil
}

// run is the state of one call to Run.
type run struct {
	m     *Mapping
	ctx   context.Context // Run's, for values; never canceled where calls use it
	arn   string
	fifo  bool
	locks *groupLocks
	// fifoReceive makes a FIFO queue's receives one at a time, as Lambda's
	// poller for a FIFO queue does: concurrent receives on moto can split
	// a message group between two batches.
	fifoReceive sync.Mutex
	stop        context.CancelFunc
	stopCh      <-chan struct{}

	ignoredFailures sync.Once     // the warning that batchItemFailures are ignored
	maxReceives     int           // the RedrivePolicy's maxReceiveCount; 0 without one
	visibility      time.Duration // the queue's VisibilityTimeout
	busy            atomic.Int32  // batches being processed

	mu      sync.Mutex // guards what follows, and serializes the callbacks
	summary Summary
	err     error                // the first fatal error
	errors  int                  // consecutive failed SQS calls
	leftAt  map[string]time.Time // when each record left for redelivery was left, by message ID
	waiting bool                 // OnWaiting was told, and nothing was received since
}

// Run polls the queue and invokes the function until ctx ends, the queue is
// empty (with UntilEmpty), or an error stops it, and returns what it did.
// The batches in flight when it stops are finished first.
//
// Function failures are not errors: they are counted in the Summary. Run
// returns an error when the queue cannot be read (wrapping ErrQueue) or the
// Invoker fails (the bootstrap cannot start, the Runner was closed). Ending
// ctx is not an error.
func (m *Mapping) Run(ctx context.Context) (Summary, error) {
	out, err := m.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(m.queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn, types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		if ctx.Err() != nil {
			return Summary{}, nil
		}
		return Summary{}, fmt.Errorf("%w: %s: %w", ErrQueue, m.queueURL, err)
	}
	vt, vtErr := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	if vtErr == nil {
		if err := m.checkVisibility(time.Duration(vt) * time.Second); err != nil {
			return Summary{}, err
		}
	} else if m.opts.FunctionTimeout > 0 && m.opts.OnWarning != nil {
		m.opts.OnWarning(fmt.Errorf("the queue's VisibilityTimeout could not be read (%q), so it is not checked against the function's timeout (%v) as Lambda checks it",
			out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)], m.opts.FunctionTimeout))
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if regionOf(arn) == "" {
		return Summary{}, fmt.Errorf("%w: %s: QueueArn %q is not an ARN", ErrQueue, m.queueURL, arn)
	}
	// The queue knows best; New could only go by the URL.
	fifo := out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	if err := check(m.opts, fifo); err != nil {
		return Summary{}, err
	}

	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	r := &run{m: m, ctx: ctx, arn: arn, fifo: fifo, locks: newGroupLocks(), stop: stop, stopCh: stopCtx.Done(),
		maxReceives: maxReceiveCount(out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]),
		visibility:  time.Duration(vt) * time.Second, leftAt: map[string]time.Time{}}
	if r.maxReceives == 0 && m.opts.UntilEmpty && m.opts.OnWarning != nil {
		// Nothing ever moves a message that keeps failing off such a
		// queue, so it is never empty: say so once, before it happens.
		m.opts.OnWarning(errors.New("the queue has no redrive policy (RedrivePolicy with a dead-letter queue): a message that keeps failing comes back after every visibility timeout, forever, and the queue is never empty"))
	}
	pollers := m.opts.Concurrency
	if c, ok := m.invoker.(interface{ Capacity() int }); ok {
		pollers = max(1, min(pollers, c.Capacity()))
	}
	var wg sync.WaitGroup
	for range pollers {
		wg.Go(r.work)
	}
	wg.Wait()
	return r.summary, r.err
}

// maxReceiveCount reads a queue's RedrivePolicy; 0 when it has none.
func maxReceiveCount(policy string) int {
	var p struct {
		MaxReceiveCount json.Number `json:"maxReceiveCount"`
	}
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil {
		return 0
	}
	n, _ := strconv.Atoi(p.MaxReceiveCount.String())
	return n
}

// namedFailures counts the entries of a response's batchItemFailures,
// valid or not: with the response ignored, any entry is a function that
// meant some records to come back.
func namedFailures(payload []byte) int {
	var resp struct {
		BatchItemFailures []json.RawMessage `json:"batchItemFailures"`
	}
	if json.Unmarshal(payload, &resp) != nil {
		return 0
	}
	return len(resp.BatchItemFailures)
}

// checkVisibility applies Lambda's rule on the queue's visibility timeout
// to the function's timeout, and AWS's recommendation.
func (m *Mapping) checkVisibility(vt time.Duration) error {
	ft := m.opts.FunctionTimeout
	warn := func(format string, args ...any) {
		if m.opts.OnWarning != nil {
			m.opts.OnWarning(fmt.Errorf(format, args...))
		}
	}
	switch {
	case ft <= 0:
	case vt < ft && !m.opts.AllowShortVisibilityTimeout:
		return &OptionError{"FunctionTimeout", fmt.Sprintf("%v: the queue's VisibilityTimeout (%v) is shorter, and Lambda refuses such an event source mapping (a batch still running when the visibility timeout ends would be delivered again)", ft, vt)}
	case vt < ft:
		warn("the queue's VisibilityTimeout (%v) is shorter than the function's timeout (%v): Lambda refuses such an event source mapping; here a batch still running when it ends is delivered again", vt, ft)
	case m.opts.Window > 0 && vt <= m.opts.Window+ft:
		warn("the queue's VisibilityTimeout (%v) is not longer than the batching window (%v) plus the function's timeout (%v): a message received early in a window can become visible again before its batch is answered, and be delivered twice", vt, m.opts.Window, ft)
	case vt < RecommendedVisibilityFactor*ft:
		warn("the queue's VisibilityTimeout (%v) is less than six times the function's timeout (%v), which AWS recommends so that a batch throttled or retried by Lambda is not delivered again while it waits", vt, ft)
	}
	return nil
}

// stopped reports whether Run should stop taking new batches.
func (r *run) stopped() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

// pause sleeps for d, or less if Run is told to stop.
func (r *run) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.stopCh:
	}
}

// fail records a fatal error and stops every worker after its batch.
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.stop()
}

// sqsError counts a failed SQS call, and returns a fatal error once too many
// failed in a row. Success resets the count.
func (r *run) sqsError(op string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.errors = 0
		return nil
	}
	r.errors++
	var gone *types.QueueDoesNotExist
	fatal := r.errors >= maxConsecutiveErrors || errors.As(err, &gone) // a deleted queue does not come back
	err = fmt.Errorf("%w: %s %s: %w", ErrQueue, op, r.m.queueURL, err)
	if fatal {
		return err
	}
	if r.m.opts.OnWarning != nil {
		r.m.opts.OnWarning(err)
	}
	return nil
}

// warn tells OnWarning of err, one call at a time.
func (r *run) warn(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m.opts.OnWarning != nil {
		r.m.opts.OnWarning(err)
	}
}

// work is one poller: it gathers a batch, runs it, and again.
func (r *run) work() {
	for !r.stopped() {
		msgs, err := r.gather()
		if err != nil {
			r.fail(err)
			return
		}
		if len(msgs) == 0 {
			if r.m.opts.UntilEmpty {
				counts, err := r.counts()
				if err != nil {
					r.fail(err)
					return
				}
				if counts.empty() {
					r.mu.Lock()
					r.summary.Empty = true
					r.mu.Unlock()
					r.stop()
					return
				}
				r.noteWaiting(counts)
			}
			if r.m.opts.PollWait < time.Second {
				r.pause(idlePause)
			}
			continue
		}
		r.busy.Add(1)
		err = r.process(msgs)
		r.busy.Add(-1)
		if err != nil {
			r.fail(err)
			return
		}
	}
}

// gather receives one batch: what the first receive returns, or with a
// window, what arrives until the window closes or the batch is full. It
// returns early, with what it has, when Run is told to stop.
func (r *run) gather() ([]types.Message, error) {
	o := r.m.opts
	start := time.Now()
	var batch []types.Message
	for {
		wait := max(o.PollWait, 0)
		if o.Window > 0 {
			wait = min(wait, o.Window-time.Since(start))
		}
		msgs, err := r.receive(min(10, o.BatchSize-len(batch)), wait)
		if err := r.sqsError("ReceiveMessage", err); err != nil {
			if len(batch) > 0 {
				return batch, nil // run what is in hand; the next receive will fail again
			}
			return nil, err
		}
		if err != nil {
			r.pause(errorPause)
		}
		batch = addFresh(batch, msgs)
		switch {
		case len(batch) >= o.BatchSize, o.Window == 0, time.Since(start) >= o.Window, r.stopped():
			return batch, nil
		}
		if len(msgs) == 0 && wait < time.Second {
			r.pause(min(idlePause, o.Window-time.Since(start)))
			if r.stopped() { // told to stop during the pause: receive nothing more
				return batch, nil
			}
		}
	}
}

// addFresh appends msgs to batch, except a message the batch holds already:
// handed out again because its visibility timeout ran out during the window,
// it takes the place of the earlier copy, whose receipt handle no longer
// deletes it. An event never holds a message twice.
func addFresh(batch, msgs []types.Message) []types.Message {
	for _, m := range msgs {
		i := slices.IndexFunc(batch, func(b types.Message) bool { return aws.ToString(b.MessageId) == aws.ToString(m.MessageId) })
		if i < 0 {
			batch = append(batch, m)
		} else {
			batch[i] = m
		}
	}
	return batch
}

// receive asks for up to n messages, waiting up to wait (in whole seconds)
// for the first. The call is not cut short when Run is told to stop, so that
// no message SQS hands out is lost in flight until its visibility timeout.
func (r *run) receive(n int, wait time.Duration) ([]types.Message, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), wait+callTimeout)
	defer cancel()
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.m.queueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(max(wait, 0) / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	if r.fifo {
		// The SDK's retries of this call reuse the ID, and SQS answers them
		// with the same messages instead of hiding more.
		in.ReceiveRequestAttemptId = aws.String(rand.Text())
		r.fifoReceive.Lock()
		defer r.fifoReceive.Unlock()
	}
	out, err := r.m.client.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, err
	}
	if r.fifo {
		// Each group's messages oldest first, whatever order the receive
		// gave them in: a FIFO queue's sequence numbers grow with each
		// message sent.
		slices.SortStableFunc(out.Messages, func(a, b types.Message) int {
			return compareSequence(a.Attributes[string(types.MessageSystemAttributeNameSequenceNumber)], b.Attributes[string(types.MessageSystemAttributeNameSequenceNumber)])
		})
	}
	return out.Messages, nil
}

// compareSequence orders two sequence numbers, decimal numbers of any
// length.
func compareSequence(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// queueCounts are a queue's approximate message counts; all -1 when they
// could not be read.
type queueCounts struct{ visible, hidden, delayed int }

// empty reports whether the queue has no visible, in-flight or delayed
// messages.
func (c queueCounts) empty() bool { return c == queueCounts{} }

// noteWaiting tells OnWaiting, once per stretch, that the run waits for
// hidden messages alone: nothing visible or delayed, no batch in flight.
func (r *run) noteWaiting(c queueCounts) {
	if c.visible != 0 || c.delayed != 0 || c.hidden <= 0 || r.busy.Load() != 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting || r.m.opts.OnWaiting == nil {
		return
	}
	r.waiting = true
	r.m.opts.OnWaiting(c.hidden)
}

// counts reads the queue's visible, in-flight and delayed messages.
func (r *run) counts() (queueCounts, error) {
	unknown := queueCounts{-1, -1, -1}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), callTimeout)
	defer cancel()
	names := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	out, err := r.m.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.m.queueURL), AttributeNames: names})
	if err := r.sqsError("GetQueueAttributes", err); err != nil {
		return unknown, err
	}
	if err != nil {
		return unknown, nil
	}
	var n [3]int
	for i, name := range names {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			return unknown, nil
		}
		n[i] = v
	}
	return queueCounts{n[0], n[1], n[2]}, nil
}

// process runs the messages of one receive: one invocation, or several if
// the event would exceed the payload limit.
func (r *run) process(msgs []types.Message) error {
	records := make([]events.SQSMessage, len(msgs))
	encoded := make([][]byte, len(msgs))
	for i, m := range msgs {
		records[i] = Record(m, r.arn)
		b, err := encodeRecord(records[i])
		if err != nil {
			return err
		}
		encoded[i] = b
	}
	r.mu.Lock()
	r.summary.Records += len(records)
	r.waiting = false
	late := r.visibility + max(r.m.opts.PollWait, 0) + time.Second
	for _, rec := range records {
		if at, ok := r.leftAt[rec.MessageId]; ok {
			delete(r.leftAt, rec.MessageId)
			if time.Since(at) > late {
				r.summary.Delayed++
			}
		}
	}
	r.mu.Unlock()
	records, encoded, err := r.filter(records, encoded)
	if err != nil {
		return err
	}
	if len(records) == 0 {
		return nil
	}

	blocked := map[string]bool{} // FIFO groups with a record left by an earlier part
	settled := 0
	for _, span := range splitBySize(encoded, r.m.opts.MaxPayload) {
		recs, encs := records[span[0]:span[1]], encoded[span[0]:span[1]]
		if r.fifo && len(blocked) > 0 {
			var held []events.SQSMessage
			recs, encs, held = holdBack(recs, encs, blocked)
			if len(held) > 0 {
				r.settle(BatchResult{Records: held, Left: ids(held), Err: ErrNotInvoked}, false, 0)
				settled += len(held)
			}
		}
		if len(recs) == 0 {
			continue
		}
		br, err := r.invoke(recs, encs)
		if err != nil {
			// This part and the rest stay in the queue, untouched.
			r.mu.Lock()
			r.summary.Left += len(records) - settled
			r.mu.Unlock()
			return err
		}
		settled += len(recs)
		for _, rec := range recs {
			if slices.Contains(br.Left, rec.MessageId) {
				blocked[rec.Attributes["MessageGroupId"]] = true
			}
		}
	}
	return nil
}

// filter deletes the records that match none of the mapping's patterns,
// as Lambda does, and returns the others.
func (r *run) filter(records []events.SQSMessage, encoded [][]byte) ([]events.SQSMessage, [][]byte, error) {
	f := r.m.opts.Filter
	if f.Len() == 0 {
		return records, encoded, nil
	}
	var keptR, dropped []events.SQSMessage
	var keptE [][]byte
	for i, rec := range records {
		v, err := eventfilter.Record(rec, "body", []byte(rec.Body))
		if err != nil {
			return nil, nil, err
		}
		if f.Match(v) {
			keptR, keptE = append(keptR, rec), append(keptE, encoded[i])
		} else {
			dropped = append(dropped, rec)
		}
	}
	if len(dropped) == 0 {
		return records, encoded, nil
	}
	deleted, delErr := r.delete(dropped)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.summary.Filtered += len(deleted)
	r.summary.Left += len(dropped) - len(deleted)
	r.summary.DeleteFailures += len(dropped) - len(deleted)
	if delErr != nil && r.m.opts.OnWarning != nil {
		r.m.opts.OnWarning(delErr)
	}
	return keptR, keptE, nil
}

// holdBack splits off the records whose FIFO group is blocked.
func holdBack(recs []events.SQSMessage, encs [][]byte, blocked map[string]bool) ([]events.SQSMessage, [][]byte, []events.SQSMessage) {
	var keptR []events.SQSMessage
	var keptE [][]byte
	var held []events.SQSMessage
	for i, rec := range recs {
		if blocked[rec.Attributes["MessageGroupId"]] {
			held = append(held, rec)
			continue
		}
		keptR, keptE = append(keptR, rec), append(keptE, encs[i])
	}
	return keptR, keptE, held
}

// invoke runs one event and settles its records.
func (r *run) invoke(recs []events.SQSMessage, encs [][]byte) (BatchResult, error) {
	var groups []string
	if r.fifo {
		for _, rec := range recs {
			groups = append(groups, rec.Attributes["MessageGroupId"])
		}
		slices.Sort(groups)
		groups = slices.Compact(groups)
		r.locks.acquire(groups)
		defer r.locks.release(groups) // after the deletions: the group's next batch sees them done
	}
	// Not canceled by Run's context: a batch in flight runs to its end.
	res, err := r.m.invoker.Invoke(context.WithoutCancel(r.ctx), joinEvent(encs))
	if err != nil {
		return BatchResult{}, fmt.Errorf("esm: invoke: %w", err)
	}
	br := BatchResult{Records: recs, Result: res}
	var keep map[string]bool // nil: keep every record
	switch {
	case res.Outcome != runtimeapi.OutcomeSuccess:
		br.Err = fmt.Errorf("%w: %s", ErrInvocationFailed, res.Outcome)
	case !r.m.opts.ReportBatchItemFailures:
		keep = map[string]bool{}
		if n := namedFailures(res.Payload); n > 0 {
			r.ignoredFailures.Do(func() {
				records := "records"
				if n == 1 {
					records = "record"
				}
				r.warn(fmt.Errorf("the function named %d %s in batchItemFailures, but the mapping does not report batch item failures (FunctionResponseTypes lacks ReportBatchItemFailures): Lambda ignores them and deletes the whole batch, so the %s named are lost", n, records, records))
			})
		}
	default:
		failed, err := FailedRecords(res.Payload, recs)
		if err != nil {
			br.Err = err
			break
		}
		keep = map[string]bool{}
		for _, id := range failed {
			if !keep[id] {
				keep[id] = true
				br.Failed = append(br.Failed, id)
			}
		}
	}
	var toDelete []events.SQSMessage
	if keep != nil {
		for _, rec := range recs {
			if !keep[rec.MessageId] {
				toDelete = append(toDelete, rec)
			}
		}
	}
	deleted, delErr := r.delete(toDelete)
	br.Deleted, br.DeleteErr = deleted, delErr
	for _, rec := range recs {
		if !slices.Contains(deleted, rec.MessageId) {
			br.Left = append(br.Left, rec.MessageId)
		}
	}
	r.settle(br, true, len(toDelete)-len(deleted))
	return br, nil
}

// settle counts a batch's result and reports it; deleteFailures is how many
// of its records the function succeeded with but could not be deleted.
func (r *run) settle(br BatchResult, invoked bool, deleteFailures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.summary
	if invoked {
		s.Invocations++
	} else {
		s.NotInvoked += len(br.Records)
	}
	switch {
	case errors.Is(br.Err, ErrInvocationFailed):
		s.FunctionErrors++
	case errors.Is(br.Err, ErrInvalidResponse):
		s.InvalidResponses++
	}
	s.ItemFailures += len(br.Failed)
	s.Deleted += len(br.Deleted)
	s.Left += len(br.Left)
	now := time.Now()
	for _, id := range br.Left {
		r.leftAt[id] = now
	}
	if r.maxReceives > 0 {
		for _, rec := range br.Records {
			if n, err := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"]); err == nil && n >= r.maxReceives && slices.Contains(br.Left, rec.MessageId) {
				br.ToDeadLetterQueue++
			}
		}
	}
	s.ToDeadLetterQueue += br.ToDeadLetterQueue
	s.DeleteFailures += deleteFailures
	if r.m.opts.OnBatch != nil {
		r.m.opts.OnBatch(br)
	}
	if br.DeleteErr != nil && r.m.opts.OnWarning != nil {
		r.m.opts.OnWarning(br.DeleteErr)
	}
}

// delete deletes recs, ten at a time, and returns the IDs deleted. Records
// it could not delete stay in the queue and will come back.
func (r *run) delete(recs []events.SQSMessage) ([]string, error) {
	var deleted []string
	var failures []string
	for chunk := range slices.Chunk(recs, 10) {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, rec := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(rec.ReceiptHandle)}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), callTimeout)
		out, err := r.m.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.m.queueURL), Entries: entries})
		cancel()
		if err != nil {
			failures = append(failures, strings.Join(ids(chunk), ", ")+": "+err.Error())
			continue
		}
		for _, ok := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i < len(chunk) {
				deleted = append(deleted, chunk[i].MessageId)
			}
		}
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(chunk) {
				failures = append(failures, chunk[i].MessageId+": "+aws.ToString(f.Code)+": "+aws.ToString(f.Message))
			}
		}
	}
	if len(failures) > 0 {
		return deleted, fmt.Errorf("%w: %d of %d records: %s", ErrDelete, len(recs)-len(deleted), len(recs), strings.Join(failures, "; "))
	}
	return deleted, nil
}

// ids returns the records' message IDs.
func ids(recs []events.SQSMessage) []string {
	out := make([]string, len(recs))
	for i, rec := range recs {
		out[i] = rec.MessageId
	}
	return out
}
