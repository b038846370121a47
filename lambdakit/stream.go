package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Stream batches: DynamoDB Streams and Kinesis Data Streams. Lambda reads a
// stream shard by shard and checkpoints: a partial batch response names
// the sequence number of a failed record, and Lambda retries the batch
// from that record on, the records after it included (with several
// failures, from the lowest). So the records of a stream batch run one at
// a time, in order, and the first failure ends the batch: running the
// records after it would only have them run again on the retry, out of
// their order.

// StreamOptions configures DynamoDBStreamBatch and KinesisBatch. The zero
// value of each field means its default.
type StreamOptions struct {
	// DeadlineMargin is how long before the invocation deadline the batch
	// stops starting records and cancels the running one; half of it is
	// left for answering. Default 1s, never more than half the time left
	// when the batch starts.
	DeadlineMargin time.Duration
	// Logger receives a line at ERROR for the record that failed ("record
	// failed"), and at DEBUG a line per record that succeeded ("record
	// done"). Default: NewLogger(os.Stderr), as for Batch.
	Logger *slog.Logger
}

// DynamoDBStreamBatchFunc is the shape of a DynamoDB stream batch handler
// that lambda.Start accepts.
type DynamoDBStreamBatchFunc func(ctx context.Context, event events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

// KinesisBatchFunc is the shape of a Kinesis batch handler that
// lambda.Start accepts.
type KinesisBatchFunc func(ctx context.Context, event events.KinesisEvent) (events.KinesisEventResponse, error)

// ErrNoSequenceNumber means a stream record that failed has no sequence
// number to name in the partial batch response: the invocation fails
// instead, and Lambda retries the whole batch.
var ErrNoSequenceNumber = errors.New("lambdakit: the failed stream record has no sequence number")

// DynamoDBStreamBatch returns a handler for a DynamoDB stream's event
// source mapping with ReportBatchItemFailures on. It runs fn on each record
// in order, one at a time; at the first record that fails (an error, a
// panic, or the deadline guard before it could finish or start) it stops,
// and answers with that record's sequence number, from which Lambda
// retries. A batch that succeeds whole answers with no failures.
func DynamoDBStreamBatch(fn func(ctx context.Context, rec *events.DynamoDBEventRecord) error, optFns ...func(*StreamOptions)) DynamoDBStreamBatchFunc {
	s := newStreamBatch(optFns)
	return func(ctx context.Context, event events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		recs := event.Records
		failed, err := s.run(ctx, len(recs), func(ctx context.Context, i int) error { return fn(ctx, &recs[i]) },
			func(i int) streamRecord {
				return streamRecord{seq: recs[i].Change.SequenceNumber, id: recs[i].EventID, kind: recs[i].EventName}
			})
		resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
		if failed != "" {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: failed})
		}
		return resp, err
	}
}

// KinesisBatch is DynamoDBStreamBatch for a Kinesis data stream.
func KinesisBatch(fn func(ctx context.Context, rec *events.KinesisEventRecord) error, optFns ...func(*StreamOptions)) KinesisBatchFunc {
	s := newStreamBatch(optFns)
	return func(ctx context.Context, event events.KinesisEvent) (events.KinesisEventResponse, error) {
		recs := event.Records
		failed, err := s.run(ctx, len(recs), func(ctx context.Context, i int) error { return fn(ctx, &recs[i]) },
			func(i int) streamRecord {
				return streamRecord{seq: recs[i].Kinesis.SequenceNumber, id: recs[i].EventID, key: recs[i].Kinesis.PartitionKey}
			})
		resp := events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{}}
		if failed != "" {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.KinesisBatchItemFailure{ItemIdentifier: failed})
		}
		return resp, err
	}
}

// streamRecord is what a stream batch logs and answers of a record.
type streamRecord struct {
	seq  string // the sequence number: the partial batch response's identifier
	id   string // the event ID
	kind string // DynamoDB's event name: INSERT, MODIFY, REMOVE
	key  string // Kinesis's partition key
}

type streamBatch struct{ opts StreamOptions }

func newStreamBatch(optFns []func(*StreamOptions)) *streamBatch {
	o := StreamOptions{}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.DeadlineMargin <= 0 {
		o.DeadlineMargin = time.Second
	}
	if o.Logger == nil {
		o.Logger = defaultLogger()
	}
	return &streamBatch{opts: o}
}

// streamProgress is how far a batch got, written by the goroutine that
// runs the records and read by the answer.
type streamProgress struct {
	mu     sync.Mutex
	next   int   // the first record not yet done
	err    error // why next failed, once it has
	closed bool  // answered: later results are dropped
}

// run runs call on records 0..n-1 in order, and returns the sequence
// number of the first that failed or did not finish before the deadline
// guard ("" when all succeeded), or an error when that record has none.
func (s *streamBatch) run(ctx context.Context, n int, call func(context.Context, int) error, rec func(int) streamRecord) (string, error) {
	if n == 0 {
		return "", nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	answerBy, _, stopGuard := deadlineGuard(ctx, s.opts.DeadlineMargin, cancel)
	defer stopGuard()

	p := &streamProgress{}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range n {
			if runCtx.Err() != nil {
				p.fail(ErrNotStarted)
				return
			}
			start := time.Now()
			var err error
			if pe := protect(func() { err = call(runCtx, i) }, func() { p.fail(ErrHandlerExited) }); pe != nil {
				err = pe
			}
			if err != nil {
				if runCtx.Err() != nil {
					err = fmt.Errorf("%w: %w", ErrCancelledAtDeadline, err)
				}
				p.fail(err)
				return
			}
			if !p.done(i) {
				return
			}
			s.logDone(ctx, rec(i), time.Since(start))
		}
	}()
	select {
	case <-finished:
	case <-answerBy:
	}
	next, err := p.answer()
	if next >= n {
		return "", nil
	}
	if err == nil {
		err = fmt.Errorf("%w: still running when the batch had to answer", ErrCancelledAtDeadline)
	}
	r := rec(next)
	s.logFailed(ctx, r, err, n-next-1)
	if r.seq == "" {
		return "", fmt.Errorf("%w (record %d of %d, event %q): %w", ErrNoSequenceNumber, next+1, n, r.id, err)
	}
	return r.seq, nil
}

// done records that record i succeeded; false once the batch answered.
func (p *streamProgress) done(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.next = i + 1
	return true
}

// fail records why the next record failed, unless the batch answered.
func (p *streamProgress) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && p.err == nil {
		p.err = err
	}
}

// answer closes the progress and returns the first record not done, and
// its error if it failed.
func (p *streamProgress) answer() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.next, p.err
}

func (s *streamBatch) logDone(ctx context.Context, r streamRecord, took time.Duration) {
	if !s.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	s.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "record done", append(r.attrs(), slog.Float64("durationMs", ms(took)))...)
}

func (s *streamBatch) logFailed(ctx context.Context, r streamRecord, err error, after int) {
	attrs := append(r.attrs(), slog.String("reasonCode", string(ReasonOf(err))), slog.String("reason", err.Error()),
		slog.Int("notProcessed", after))
	s.opts.Logger.LogAttrs(ctx, slog.LevelError, "record failed", attrs...)
}

func (r streamRecord) attrs() []slog.Attr {
	a := []slog.Attr{slog.String("sequenceNumber", r.seq), slog.String("eventId", r.id)}
	if r.kind != "" {
		a = append(a, slog.String("eventName", r.kind))
	}
	if r.key != "" {
		a = append(a, slog.String("partitionKey", r.key))
	}
	return a
}
