package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// BatchOptions configures Batch. The zero value of each field means its
// default.
type BatchOptions struct {
	// Concurrency bounds how many records (standard queues) or message
	// groups (FIFO queues) run at once. Default DefaultConcurrency.
	Concurrency int
	// FIFOStopOnFirstFailure applies AWS's strict FIFO rule: at the first
	// failure the rest of the whole batch is reported failed without being
	// attempted, and records run one at a time in batch order. By default
	// only the rest of the failed record's message group is skipped, and
	// other groups go on.
	FIFOStopOnFirstFailure bool
	// DeadlineMargin is how long before the invocation deadline the batch
	// stops starting records and cancels the running ones; half of it is
	// left for their cleanup and for answering. Default 1s, never more
	// than half the time left when the batch starts.
	DeadlineMargin time.Duration
	// AllowAllFailed makes the batch answer normally when every record
	// failed. By default it returns ErrAllFailed instead, so that the event
	// source mapping backs off rather than polling again at full speed.
	AllowAllFailed bool
	// Logger receives a line per failed record, at ERROR with the reason
	// ("message failed", or "message failed permanently: sent to the
	// dead-letter queue"), and, at DEBUG only, a line per record that
	// succeeded ("message done"): at INFO a healthy batch writes no line
	// but its metrics line. A line the logger would drop is never built.
	// Default: NewLogger(os.Stderr), whose level and format come from
	// AWS_LAMBDA_LOG_LEVEL and AWS_LAMBDA_LOG_FORMAT as Batch is called.
	// For a level set in code, give a logger with that level.
	Logger *slog.Logger
	// DisableMetrics turns off the metrics line the batch writes per
	// invocation (CloudWatch Embedded Metric Format).
	DisableMetrics bool
	// DetailedMetrics makes the metrics line declare every metric it
	// counts (records, successes, each failure reason, duplicates, store
	// latency, batch duration: 19 custom metrics a function and queue),
	// instead of the four an alarm needs: Failed, FailedPermanent,
	// FailedLeaseLost and FailedAfterEffect. CloudWatch bills each custom
	// metric by the month.
	DetailedMetrics bool
	// MetricsNamespace is the metrics' CloudWatch namespace. Default
	// "lambdakit".
	MetricsNamespace string
	// MetricsWriter receives the metrics line. Default: standard output
	// inside a Lambda runtime (AWS_LAMBDA_RUNTIME_API set, as Lambda and
	// lambdakit's local tools set it), where CloudWatch reads it;
	// elsewhere (tests, other programs) none unless set here.
	MetricsWriter io.Writer
	// FunctionName is the metrics' FunctionName dimension. Default
	// AWS_LAMBDA_FUNCTION_NAME.
	FunctionName string
	// DeadLetters, if set, takes the messages whose records fail
	// permanently (see IsPermanent): each is sent to the dead-letter queue
	// at once, and its record is reported succeeded so that SQS deletes it.
	// If the send fails, the record fails as usual and comes back. Default
	// nil: permanent failures fail like any other, until the queue's
	// maxReceiveCount moves them to its dead-letter queue.
	DeadLetters DeadLetterSender
	// IsPermanent decides which record errors are permanent. Default:
	// errors marked with Permanent, and poison (see IsPoison): a body that
	// does not decode, a missing or unreadable key, a key reused with
	// another payload. Set it to IsPermanent to count only marked errors.
	IsPermanent func(error) bool
	// Backoff, if set with a Changer, makes records that failed for a
	// transient reason come back later at each receive, so that a
	// downstream outage does not drive them into the dead-letter queue:
	// see Backoff. Default nil: a failed record comes back after the
	// queue's visibility timeout, as SQS does by itself.
	Backoff *Backoff
}

// DefaultConcurrency is how many records, or FIFO message groups, a batch
// runs at once by default. A batch of SQS's usual 10 runs whole; a standard
// queue's batch of up to 10,000 records runs 64 at a time, so that it opens
// no more connections than dynamostore.DefaultMaxConns (a Lambda function
// may hold 1,024 file descriptors) and keeps no more records in memory
// than it works on. Each record's own latency is unchanged.
const DefaultConcurrency = 64

// BatchFunc is the shape of an SQS batch handler that lambda.Start accepts.
type BatchFunc func(ctx context.Context, event events.SQSEvent) (events.SQSEventResponse, error)

// Batch returns a BatchFunc that runs h for each record of an SQS event and
// answers with a partial batch response: the records that failed, or were
// not started, are reported by message ID so that only they come back.
// The event source mapping must have ReportBatchItemFailures on.
//
// Records of a FIFO queue (event source ARN ending in ".fifo") run in order
// within their message group; after a failure the group's later records are
// reported failed (ErrSkipped) without being attempted. A panic fails only
// its record. Before the invocation deadline the batch stops starting
// records, cancels the running ones and answers in time.
func Batch(h Handler, optFns ...func(*BatchOptions)) BatchFunc {
	o := BatchOptions{DeadlineMargin: time.Second}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.DeadlineMargin <= 0 {
		o.DeadlineMargin = time.Second
	}
	if o.Logger == nil {
		o.Logger = defaultLogger()
	}
	if o.MetricsNamespace == "" {
		o.MetricsNamespace = "lambdakit"
	}
	if o.MetricsWriter == nil {
		if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
			o.DisableMetrics = true
		} else {
			o.MetricsWriter = os.Stdout
		}
	}
	if o.FunctionName == "" {
		o.FunctionName = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if o.IsPermanent == nil {
		o.IsPermanent = permanentOrPoison
	}
	b := &batch{h: h, opts: o}
	if o.Backoff != nil && o.Backoff.Changer != nil {
		b.backoff = o.Backoff.withDefaults()
		b.backoff.warnAtStart(o.Logger)
		if b.backoff.noRoom() {
			b.backoff.Changer = nil
		}
	}
	return b.handle
}

type batch struct {
	h    Handler
	opts BatchOptions
	// backoff is opts.Backoff with its defaults; its Changer is nil when
	// the batch delays nothing.
	backoff Backoff
	// callFailed is set once a visibility call has failed and been
	// logged, so that the container logs it once.
	callFailed atomic.Bool
	// drawMu serializes the draws from backoff.Rand, which is not safe for
	// concurrent use: invocations running at once in one process (Lambda
	// Managed Instances) share this batch.
	drawMu sync.Mutex
}

// outcomes holds each record's result. Handlers that ignore cancellation may
// still be running when the batch answers; closing the outcomes makes their
// late results harmless.
type outcomes struct {
	mu      sync.Mutex
	errs    []error
	started []bool
	done    []bool
	closed  bool
	notes   []recordNote // what became of each record, filled as it runs
}

func (o *outcomes) start(i int) {
	o.mu.Lock()
	o.started[i] = true
	o.mu.Unlock()
}

func (o *outcomes) set(i int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed && !o.done[i] {
		o.errs[i], o.done[i] = err, true
	}
}

func (b *batch) handle(ctx context.Context, event events.SQSEvent) (events.SQSEventResponse, error) {
	recs := event.Records
	if len(recs) == 0 {
		return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}, nil
	}
	began := time.Now()
	out := &outcomes{errs: make([]error, len(recs)), started: make([]bool, len(recs)), done: make([]bool, len(recs)),
		notes: make([]recordNote, len(recs))}

	batchCtx := withBatch(ctx, recs)
	runCtx, cancel := context.WithCancel(batchCtx)
	defer cancel()
	answerBy, answerAt, stopGuard := b.guard(ctx, cancel)
	defer stopGuard()
	// A dead-letter send started before the guard cancels the records runs
	// on until the answer: cut short at the guard, a send SQS had taken
	// would fail its record, and the message would come back to be
	// dead-lettered a second time.
	sendCtx := batchCtx
	if !answerAt.IsZero() && b.opts.DeadLetters != nil {
		var cancelSend context.CancelFunc
		sendCtx, cancelSend = context.WithDeadline(context.WithoutCancel(batchCtx), answerAt)
		defer cancelSend()
	}

	tasks := b.plan(recs)
	limit := b.opts.Concurrency
	if limit <= 0 {
		limit = DefaultConcurrency
	}
	limit = min(limit, len(tasks))
	// A channel semaphore rather than errgroup.SetLimit: waiting for a
	// free slot must race the deadline guard (a batch waiting for a slot
	// at its deadline must stop starting records), and errgroup's Go blocks
	// without a context. Panics are recovered per record (runRecord).
	sem := make(chan struct{}, limit)
	// running counts the tasks started and not yet ended, and one more
	// while tasks are being started: whoever takes it to zero closes
	// finished, with no goroutine of its own to wait for them.
	var running atomic.Int64
	running.Store(1)
	finished := make(chan struct{})
	end := func() {
		if running.Add(-1) == 0 {
			close(finished)
		}
	}
	for _, task := range tasks {
		select {
		case sem <- struct{}{}:
		case <-runCtx.Done():
		}
		if runCtx.Err() != nil {
			break // the rest is reported ErrNotStarted below
		}
		running.Add(1)
		go func() {
			growStack()
			defer end()
			defer func() { <-sem }()
			b.runTask(runCtx, sendCtx, recs, task, out)
		}()
	}
	end()
	select {
	case <-finished:
	case <-answerBy:
	}
	return b.answer(ctx, recs, out, began, answerBy)
}

// guard cancels the records' context DeadlineMargin before the invocation
// deadline: see deadlineGuard.
func (b *batch) guard(ctx context.Context, cancel context.CancelFunc) (answerBy <-chan struct{}, answerAt time.Time, stop func()) {
	return deadlineGuard(ctx, b.opts.DeadlineMargin, cancel)
}

// deadlineGuard calls cancel margin before ctx's deadline, and returns a
// channel closed margin/2 before it, when the batch must answer, the time
// it closes (zero without a deadline), and a function that stops both
// timers once the batch has answered. The margin is never more than half
// the time left.
func deadlineGuard(ctx context.Context, margin time.Duration, cancel context.CancelFunc) (answerBy <-chan struct{}, answerAt time.Time, stop func()) {
	answer := make(chan struct{})
	deadline, ok := ctx.Deadline()
	if !ok {
		return answer, time.Time{}, func() {} // never closed: no deadline to beat
	}
	if left := time.Until(deadline); margin > left/2 {
		margin = left / 2
	}
	answerAt = deadline.Add(-margin / 2)
	cancelTimer := time.AfterFunc(time.Until(deadline.Add(-margin)), cancel)
	answerTimer := time.AfterFunc(time.Until(answerAt), func() { close(answer) })
	return answer, answerAt, func() { cancelTimer.Stop(); answerTimer.Stop() }
}

// plan splits the records into tasks: lists of record indexes run one after
// the other, where a failure skips the rest of the list.
func (b *batch) plan(recs []events.SQSMessage) [][]int {
	all := make([]int, len(recs))
	for i := range recs {
		all[i] = i
	}
	if !isFIFO(recs) {
		tasks := make([][]int, len(recs))
		for i := range recs {
			tasks[i] = all[i : i+1]
		}
		return tasks
	}
	if b.opts.FIFOStopOnFirstFailure {
		return [][]int{all}
	}
	var tasks [][]int
	group := map[string]int{} // message group ID → task index, in order of first appearance
	for i, r := range recs {
		g := r.Attributes["MessageGroupId"]
		t, ok := group[g]
		if !ok {
			t = len(tasks)
			group[g] = t
			tasks = append(tasks, nil)
		}
		tasks[t] = append(tasks[t], i)
	}
	return tasks
}

func isFIFO(recs []events.SQSMessage) bool {
	for i := range recs {
		if strings.HasSuffix(recs[i].EventSourceARN, ".fifo") {
			return true
		}
	}
	return false
}

// runTask runs a task's records with ctx, which the deadline guard
// cancels; sendCtx is for the dead-letter sends, and ends at the answer.
func (b *batch) runTask(ctx, sendCtx context.Context, recs []events.SQSMessage, task []int, out *outcomes) {
	for n, i := range task {
		if ctx.Err() != nil {
			return // not started: answer reports ErrNotStarted
		}
		out.start(i)
		note := &out.notes[i]
		note.mu.Lock()
		note.start = time.Now()
		note.messageID = recs[i].MessageId
		note.mu.Unlock()
		exited := func(err error) {
			// runtime.Goexit unwinds this goroutine past the rest of
			// runTask: fail the record for what it is, and skip the
			// rest of its task as after any failure, rather than let
			// the answer blame the deadline.
			note.mu.Lock()
			note.elapsed = time.Since(note.start)
			note.mu.Unlock()
			out.set(i, err)
			for _, j := range task[n+1:] {
				out.set(j, ErrSkipped)
			}
		}
		herr := b.runRecord(context.WithValue(ctx, noteKey{}, note), &recs[i], func() { exited(ErrHandlerExited) })
		err := herr
		if herr != nil && b.opts.DeadLetters != nil { // a success, the usual case, skips this
			if pe := protect(func() { err = b.deadLetter(ctx, sendCtx, &recs[i], herr) }, func() {
				// IsPermanent or the dead-letter sender called Goexit
				// (a test's t.FailNow, say): the message is not known
				// to be in the dead-letter queue, so it fails and comes
				// back.
				exited(errors.Join(herr, fmt.Errorf("%w (in BatchOptions.IsPermanent or DeadLetters)", ErrHandlerExited)))
			}); pe != nil {
				err = errors.Join(herr, pe) // deadLetter protects its calls: not reached
			}
		}
		note.mu.Lock()
		note.elapsed = time.Since(note.start)
		if err == nil && herr != nil {
			note.deadLettered = herr
		}
		note.mu.Unlock()
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ErrCancelledAtDeadline, err)
		}
		out.set(i, err)
		if err != nil {
			for _, j := range task[n+1:] {
				out.set(j, ErrSkipped)
			}
			return
		}
	}
}

// runRecord runs the handler on msg. A panic fails only its record, as a
// *PanicError; onGoexit runs if the handler calls runtime.Goexit instead.
func (b *batch) runRecord(ctx context.Context, msg *events.SQSMessage, onGoexit func()) (err error) {
	if pe := protect(func() { _, err = b.h.Handle(ctx, msg) }, onGoexit); pe != nil {
		return pe
	}
	return err
}

// answer builds the response from the outcomes, delays the records that
// failed (Backoff), logs a line per failed record (and at DEBUG per
// record), and writes the invocation's metrics line.
func (b *batch) answer(ctx context.Context, recs []events.SQSMessage, out *outcomes, began time.Time, answerBy <-chan struct{}) (events.SQSEventResponse, error) {
	out.mu.Lock()
	out.closed = true
	errs := make([]error, len(recs))
	for i := range recs {
		switch {
		case out.done[i]:
			errs[i] = out.errs[i]
		case out.started[i]:
			errs[i] = ErrStillRunning
		default:
			errs[i] = ErrNotStarted
		}
	}
	out.mu.Unlock()
	if b.backoff.Changer != nil {
		b.delayFailed(ctx, recs, errs, out.notes, answerBy)
	}

	// An empty list, not null, when nothing failed: what Lambda documents.
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	var failures []MessageFailure
	missing := 0
	reported := make(map[string]bool)
	metrics := &invocationMetrics{detailed: b.opts.DetailedMetrics, backoff: b.backoff.Changer != nil}
	metered := make(map[*LeaseLostError]bool)
	// Asked once a batch: a record that succeeded is logged at DEBUG only,
	// and builds nothing when DEBUG is off.
	debug := b.opts.Logger.Enabled(ctx, slog.LevelDebug)
	for i, err := range errs {
		note := &out.notes[i]
		b.logRecord(ctx, &recs[i], note, err, debug, metered)
		if !b.opts.DisableMetrics {
			metrics.add(note, err)
		}
		if err == nil {
			continue
		}
		id := recs[i].MessageId
		failures = append(failures, MessageFailure{MessageID: id, Err: err})
		if id == "" {
			// Lambda fails the whole batch on an empty itemIdentifier;
			// say so plainly instead.
			missing++
			continue
		}
		if !reported[id] {
			reported[id] = true
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
	}
	var batchErr error
	switch {
	case missing > 0:
		batchErr = &MissingMessageIDError{Failures: failures, Missing: missing}
	case len(failures) == len(recs) && !b.opts.AllowAllFailed:
		batchErr = &AllFailedError{Failures: failures}
	}
	if !b.opts.DisableMetrics {
		metrics.duration = time.Since(began)
		if err := writeEMF(b.opts.MetricsWriter, b.opts.MetricsNamespace, b.opts.FunctionName, queueName(recs), requestID(ctx), began, metrics); err != nil {
			b.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "metrics not written", slog.String("reason", err.Error()))
		}
	}
	return resp, batchErr
}

// logRecord logs what became of one record: its message ID, the hashed
// idempotency key (the record's ID, never the raw key or the body), the
// outcome, and how long it took; for a failure, the reason too; and what
// the handler added with AddLogAttrs. A record that succeeded is logged
// only if debug (the logger takes DEBUG lines), and otherwise costs no
// attribute at all. A lost
// lease adds a LeaseLost count in the Embedded Metric Format to its line,
// once per lost lease: records that waited on the lost one in this
// container fail with the same *LeaseLostError, and metered remembers
// which were counted.
func (b *batch) logRecord(ctx context.Context, msg *events.SQSMessage, note *recordNote, err error, debug bool, metered map[*LeaseLostError]bool) {
	note.mu.Lock()
	dup, replayed, elapsed, dead := note.duplicate, note.replayed, note.elapsed, note.deadLettered
	retryIn, retryErr := note.retryIn, note.retryErr
	if err == nil && dead == nil && !debug {
		note.mu.Unlock()
		return
	}
	id := note.loggedID()
	var own []slog.Attr
	if len(note.attrs) > 0 {
		own = handlerAttrs(note.attrs)
	}
	note.mu.Unlock()
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("messageId", msg.MessageId))
	if id != "" {
		attrs = append(attrs, slog.String("recordId", id))
	}
	if g := msg.Attributes["MessageGroupId"]; g != "" {
		attrs = append(attrs, slog.String("messageGroupId", g))
	}
	attrs = append(attrs, slog.Float64("durationMs", ms(elapsed)))
	if dead != nil {
		// Handled: SQS deletes it, and the dead-letter queue has it.
		attrs = append(attrs, slog.String("outcome", "dead-lettered"), slog.String("reasonCode", string(deadLetteredReason(dead))),
			slog.String("reason", dead.Error()))
		attrs = append(attrs, own...)
		b.opts.Logger.LogAttrs(ctx, slog.LevelError, "message failed permanently: sent to the dead-letter queue", attrs...)
		return
	}
	if err == nil {
		outcome := "processed"
		switch {
		case replayed:
			outcome = "replayed"
		case dup != dupNone:
			outcome = "duplicate"
		}
		attrs = append(attrs, slog.String("outcome", outcome))
		attrs = append(attrs, own...)
		b.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "message done", attrs...)
		return
	}
	attrs = append(attrs, slog.String("outcome", "failed"), slog.String("reasonCode", string(ReasonOf(err))),
		slog.String("reason", err.Error()))
	switch {
	case retryErr != nil:
		attrs = append(attrs, slog.String("retryNotDelayed", retryErr.Error()))
	case retryIn > 0:
		attrs = append(attrs, slog.Float64("retryInSeconds", retryIn.Seconds()))
	}
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		attrs = append(attrs, slog.String("stack", string(pe.Stack)))
	}
	if lost := (*LeaseLostError)(nil); errors.As(err, &lost) && !metered[lost] {
		metered[lost] = true
		attrs = append(attrs, leaseLostMetric(lost)...)
	}
	attrs = append(attrs, own...)
	b.opts.Logger.LogAttrs(ctx, slog.LevelError, "message failed", attrs...)
}

// leaseLostMetric makes a failure line also a CloudWatch metric in the
// Embedded Metric Format (LeaseLost, namespace lambdakit, by prefix), so
// that an alarm can watch lost leases without any API call. A lost lease
// means a lease (the invocation deadline) was too short for the work, or
// clocks disagree.
func leaseLostMetric(lost *LeaseLostError) []slog.Attr {
	return []slog.Attr{
		slog.String("prefix", lost.Prefix), slog.String("op", lost.Op), slog.Int("LeaseLost", 1),
		slog.Any("_aws", map[string]any{
			"Timestamp": time.Now().UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  "lambdakit",
				"Dimensions": [][]string{{"prefix"}},
				"Metrics":    []any{map[string]string{"Name": "LeaseLost", "Unit": "Count"}},
			}},
		}),
	}
}
