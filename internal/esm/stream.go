package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/kinesisstream"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// A stream's event source mapping, as Lambda runs it for a DynamoDB stream
// or a Kinesis data stream alike: each shard is read in order from a
// checkpoint, a batch of up to BatchSize records at a time. A batch that
// succeeds moves the checkpoint past it. A batch that fails is retried from
// the checkpoint: the whole batch after a function error, a crash or a
// timeout; with ReportBatchItemFailures, from the lowest sequence number the
// function named (an empty or unknown identifier fails the whole batch).
// After MaximumRetryAttempts retries, the records from the checkpoint to the
// batch's end are discarded, an invocation record describing them goes to
// the on-failure destination if there is one, and the shard goes on.
//
// BisectBatchOnFunctionError, as AWS documents it
// (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html,
// https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html):
// a batch that fails whole is split in two halves, each delivered on its
// own, the first half first; and a partial batch response splits the batch
// at the named sequence number, so that exactly the records from it to the
// batch's end are retried (without bisecting, the retry is a new read of up
// to BatchSize records from that sequence number). "Splitting batches
// doesn't consume the retry quota": a failure that splits a batch is not
// counted as a retry, and each half starts with no retries. What AWS does
// not document, chosen here: a batch of one record cannot be split, so its
// failures count as retries and it is discarded after MaximumRetryAttempts
// of them; a partial response that names the batch's first record splits
// nothing and counts as a retry; a response that fails the whole batch (an
// unknown identifier) is split like a function error.

// Stream limits and defaults, Lambda's.
const (
	DefaultStreamBatchSize = 100
	MaxStreamBatchSize     = 10000
	// DefaultStreamPollInterval: Lambda polls a stream's shards four
	// times a second.
	DefaultStreamPollInterval = 250 * time.Millisecond
	// MaxStreamRetryAttempts bounds MaximumRetryAttempts; -1 is Lambda's
	// default, retrying until the records expire from the stream.
	MaxStreamRetryAttempts = 10000
)

// StreamOptions configures a StreamMapping.
type StreamOptions struct {
	// BatchSize is the most records per invocation: 1 to 10,000, default
	// 100.
	BatchSize int
	// ReportBatchItemFailures reads the function's answer as a partial
	// batch response (FunctionResponseTypes).
	ReportBatchItemFailures bool
	// MaximumRetryAttempts is how many times a failed batch is retried
	// before it is discarded: 0 to 10,000, or -1 (the default, as Lambda's)
	// for as long as the records stay in the stream.
	MaximumRetryAttempts int
	// BisectBatchOnFunctionError splits a batch that fails in two, and a
	// batch answered with a partial response at the named record (see the
	// top of this file).
	BisectBatchOnFunctionError bool
	// OnFailure, if set, gets an invocation record for every batch
	// discarded (DestinationConfig.OnFailure).
	OnFailure *SQSDestination
	// FunctionARN is the function's ARN in the invocation records. Default
	// runtimeapi.DefaultFunctionARN(Region, "function"), what a Runner's
	// function sees when nothing names it.
	FunctionARN string
	// InvokeIdentityARN is a Kinesis record's invokeIdentityArn, the role
	// Lambda invokes the function with. Default arn:aws:iam::ACCOUNT:role/
	// lambdakit-local, ACCOUNT the stream's: nothing runs under a role here.
	InvokeIdentityARN string
	// UntilEmpty stops Run once every shard has no record past its
	// checkpoint.
	UntilEmpty bool
	// PollInterval is the pause after a round of reads that found nothing.
	PollInterval time.Duration
	// Region is the records' awsRegion.
	Region string
	// OnBatch, if set, is called after each batch, one at a time.
	OnBatch func(StreamBatchResult)
	// Filter is the mapping's FilterCriteria. A record that none of its
	// patterns match is passed over without an invocation, and the
	// checkpoint moves past it, as Lambda does; nil lets every record
	// through. A Kinesis record's data is matched as Lambda matches it, at
	// the key "data", decoded from base64.
	Filter *eventfilter.Filter
}

// StreamRecord is one record of a stream batch as the function gets it:
// a DynamoDB stream's or a Kinesis data stream's, whichever the mapping
// reads. Exactly one of the two is set. Their fields are promoted, so that
// rec.Change and rec.Kinesis read as they do in the function.
type StreamRecord struct {
	*events.DynamoDBEventRecord
	*events.KinesisEventRecord
}

// SequenceNumber is the record's sequence number in its shard.
func (r StreamRecord) SequenceNumber() string {
	if r.DynamoDBEventRecord != nil {
		return r.Change.SequenceNumber
	}
	return r.Kinesis.SequenceNumber
}

// arrival is when the record reached the stream, as the stream says.
func (r StreamRecord) arrival() time.Time {
	if r.DynamoDBEventRecord != nil {
		return r.Change.ApproximateCreationDateTime.Time
	}
	return r.Kinesis.ApproximateArrivalTimestamp.Time
}

// MarshalJSON encodes the record that is set: encoding/json would drop the
// fields the two embedded records share.
func (r StreamRecord) MarshalJSON() ([]byte, error) {
	if r.DynamoDBEventRecord != nil {
		return json.Marshal(r.DynamoDBEventRecord)
	}
	return json.Marshal(r.KinesisEventRecord)
}

// StreamBatchResult is what became of one batch.
type StreamBatchResult struct {
	Shard   string
	Records []StreamRecord
	Result  runtimeapi.Result
	// Attempt is the batch's delivery from its first record: 1, then 2 on
	// its first retry, and so on. A half of a split batch starts at 1.
	Attempt int
	// RetryFrom is the sequence number the shard is delivered again from,
	// or "" when the batch succeeded, was split or was discarded.
	RetryFrom string
	// Bisected reports that the batch was split in two halves, delivered
	// next (BisectBatchOnFunctionError).
	Bisected bool
	// Discarded holds the records given up on after MaximumRetryAttempts.
	Discarded []StreamRecord
	// Sent is the invocation record sent to the on-failure destination
	// for Discarded, and SentMessageID the SQS message's ID.
	Sent          *InvocationRecord
	SentMessageID string
	// Err says why the batch failed as a whole, if it did.
	Err error
}

// StreamSummary is what Run did.
type StreamSummary struct {
	Invocations int
	Records     int // records delivered, each delivery counted
	Retries     int // batches delivered again from a checkpoint
	Bisections  int // batches split in two
	Discarded   int // records given up on
	Sent        int // invocation records sent to the on-failure destination
	Filtered    int // records passed over by Filter, each reading counted
	Empty       bool
}

// ErrStream means the stream could not be read.
var ErrStream = errors.New("esm: the stream cannot be read")

// StreamMapping is a stream's event source mapping.
type StreamMapping struct {
	src     streamSource
	invoker Invoker
	opts    StreamOptions
}

// NewStream returns the mapping of the DynamoDB stream streamARN to
// invoker.
func NewStream(client ddbstream.API, streamARN string, invoker Invoker, optFns ...func(*StreamOptions)) (*StreamMapping, error) {
	return newStreamMapping(streamARN, invoker, optFns, func(o StreamOptions) streamSource {
		return &ddbSource{client: client, arn: streamARN, region: o.Region}
	})
}

// NewKinesisStream returns the mapping of the Kinesis data stream
// streamARN to invoker.
func NewKinesisStream(client kinesisstream.API, streamARN string, invoker Invoker, optFns ...func(*StreamOptions)) (*StreamMapping, error) {
	return newStreamMapping(streamARN, invoker, optFns, func(o StreamOptions) streamSource {
		return &kinesisSource{client: client, arn: streamARN, region: o.Region, identity: o.InvokeIdentityARN}
	})
}

func newStreamMapping(streamARN string, invoker Invoker, optFns []func(*StreamOptions), source func(StreamOptions) streamSource) (*StreamMapping, error) {
	o := StreamOptions{MaximumRetryAttempts: -1}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultStreamBatchSize
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultStreamPollInterval
	}
	if o.FunctionARN == "" {
		region := o.Region
		if region == "" {
			region = regionOf(streamARN)
		}
		o.FunctionARN = runtimeapi.DefaultFunctionARN(region, "function")
	}
	if o.InvokeIdentityARN == "" {
		o.InvokeIdentityARN = "arn:aws:iam::" + accountOf(streamARN) + ":role/lambdakit-local"
	}
	switch {
	case o.BatchSize < 1 || o.BatchSize > MaxStreamBatchSize:
		return nil, &OptionError{Option: "BatchSize", Reason: fmt.Sprintf("%d: want 1 to %d", o.BatchSize, MaxStreamBatchSize)}
	case o.MaximumRetryAttempts < -1 || o.MaximumRetryAttempts > MaxStreamRetryAttempts:
		return nil, &OptionError{Option: "MaximumRetryAttempts", Reason: fmt.Sprintf("%d: want -1 to %d", o.MaximumRetryAttempts, MaxStreamRetryAttempts)}
	case o.OnFailure != nil && (o.OnFailure.Client == nil || o.OnFailure.QueueURL == ""):
		return nil, &OptionError{Option: "OnFailure", Reason: "needs an SQS client and a queue URL"}
	case streamARN == "":
		return nil, &OptionError{Option: "streamARN", Reason: "empty"}
	}
	return &StreamMapping{src: source(o), invoker: invoker, opts: o}, nil
}

// shardState is where a shard's delivery stands.
type shardState struct {
	id  string
	pos position
	// pending are the batches a failed one was split into, in stream
	// order: the shard is delivered from them, first to last, before it is
	// read again.
	pending [][]StreamRecord
	// attempts counts the deliveries of the batch at the front, toward
	// MaximumRetryAttempts.
	attempts int
	// finished: the shard is closed and every record of it delivered.
	finished bool
}

// done moves the checkpoint past recs, the batch at the front.
func (sh *shardState) done(recs []StreamRecord) {
	if len(sh.pending) > 0 {
		sh.pending = sh.pending[1:]
	}
	sh.pos = position{after: recs[len(recs)-1].SequenceNumber()}
	sh.attempts = 0
}

// replace puts batches in place of the batch at the front.
func (sh *shardState) replace(batches ...[]StreamRecord) {
	rest := sh.pending
	if len(rest) > 0 {
		rest = rest[1:]
	}
	sh.pending = append(slices.Clip(batches), rest...)
}

// Run reads the shards and invokes the function until ctx ends, every
// shard is empty (with UntilEmpty), or an error stops it. Function
// failures are not errors: they are retried, counted and reported. An
// error means the stream could not be read (wrapping ErrStream), an
// invocation record could not be sent (ErrDestination), or the Invoker
// failed.
//
// Shards are read as Lambda reads them, by their lineage: the shard list
// is read again every shardListInterval, and before the stream is called
// empty, so that the shards a split (or a Kinesis merge) creates during
// the run are read too, and a shard is read only
// once each of its parents is read to its end, so that no record of a
// child reaches the function before a record of its parent.
func (m *StreamMapping) Run(ctx context.Context) (StreamSummary, error) {
	var sum StreamSummary
	shards := map[string]*shardState{}
	var list []shardInfo
	listed := map[string]bool{}
	var listedAt time.Time // zero: list the shards before the next round
	for ctx.Err() == nil {
		fresh := listedAt.IsZero() || time.Since(listedAt) >= shardListInterval
		if fresh {
			var err error
			if list, err = m.src.shards(ctx); err != nil {
				if ctx.Err() != nil {
					return sum, nil
				}
				return sum, err
			}
			listedAt = time.Now()
			clear(listed)
			for _, info := range list {
				listed[info.id] = true
			}
		}
		progress := false
		for _, info := range list {
			sh := shards[info.id]
			if sh == nil {
				sh = &shardState{id: info.id}
				shards[info.id] = sh
			}
			if sh.finished || !parentsFinished(info, shards, listed) {
				continue
			}
			read := len(sh.pending) == 0 // a split batch's parts were filtered when read
			recs, err := m.next(ctx, sh)
			if err != nil {
				if ctx.Err() != nil {
					return sum, nil
				}
				return sum, err
			}
			if read && len(recs) > 0 && m.opts.Filter.Len() > 0 {
				kept, err := m.filter(recs)
				if err != nil {
					return sum, err
				}
				sum.Filtered += len(recs) - len(kept)
				if len(kept) == 0 {
					// Consumed without an invocation.
					sh.pos = position{after: recs[len(recs)-1].SequenceNumber()}
					sh.attempts = 0
					progress = true
					continue
				}
				recs = kept
			}
			if len(recs) == 0 {
				// A closed shard with nothing past the checkpoint
				// is done: its children may start.
				if info.closed {
					sh.finished = true
					progress = true
				}
				continue
			}
			progress = true
			if err := m.deliver(ctx, sh, recs, &sum); err != nil {
				return sum, err
			}
		}
		if !progress {
			if m.opts.UntilEmpty {
				if !fresh {
					// Empty by a list read earlier: read it again,
					// for the shards a split made since.
					listedAt = time.Time{}
					continue
				}
				sum.Empty = true
				return sum, nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(m.opts.PollInterval):
			}
		}
	}
	return sum, nil
}

// filter returns the records of recs that the mapping's Filter matches.
func (m *StreamMapping) filter(recs []StreamRecord) ([]StreamRecord, error) {
	var kept []StreamRecord
	for _, r := range recs {
		var v map[string]any
		var err error
		if r.KinesisEventRecord != nil {
			v, err = eventfilter.Record(r, "data", r.Kinesis.Data)
		} else {
			v, err = eventfilter.Record(r, "", nil)
		}
		if err != nil {
			return nil, err
		}
		if m.opts.Filter.Match(v) {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// shardListInterval is how often Run reads the shard list again: within
// DynamoDB Streams' limit on DescribeStream, 10 calls a second per stream,
// whatever the rounds' pace.
const shardListInterval = time.Second

// parentsFinished reports whether every parent of the shard info is read
// to its end; a parent the stream no longer lists has aged out of it, with
// nothing left to read.
func parentsFinished(info shardInfo, shards map[string]*shardState, listed map[string]bool) bool {
	for _, p := range info.parents {
		if listed[p] && (shards[p] == nil || !shards[p].finished) {
			return false
		}
	}
	return true
}

// next returns the batch to deliver on sh: a split batch's next part, else
// up to BatchSize records from the checkpoint.
func (m *StreamMapping) next(ctx context.Context, sh *shardState) ([]StreamRecord, error) {
	if len(sh.pending) > 0 {
		return sh.pending[0], nil
	}
	return m.src.read(ctx, sh.id, sh.pos, m.opts.BatchSize)
}

// deliver invokes the function on recs, the batch at sh's checkpoint, and
// moves the checkpoint as Lambda would.
func (m *StreamMapping) deliver(ctx context.Context, sh *shardState, recs []StreamRecord, sum *StreamSummary) error {
	event, err := json.Marshal(struct {
		Records []StreamRecord `json:"Records"`
	}{recs})
	if err != nil {
		return err
	}
	sh.attempts++
	res, err := m.invoker.Invoke(ctx, event)
	if err != nil {
		return err
	}
	sum.Invocations++
	sum.Records += len(recs)
	br := StreamBatchResult{Shard: sh.id, Records: recs, Result: res, Attempt: sh.attempts}

	from, ferr := m.failedFrom(res, recs)
	br.Err = ferr
	switch {
	case ferr == nil && from < 0: // success
		sh.done(recs)
	case ferr != nil && m.opts.BisectBatchOnFunctionError && len(recs) > 1:
		// Not a retry: the halves start afresh.
		sh.replace(recs[:len(recs)/2], recs[len(recs)/2:])
		sh.attempts = 0
		br.Bisected = true
		sum.Bisections++
	case m.opts.MaximumRetryAttempts >= 0 && sh.attempts > m.opts.MaximumRetryAttempts:
		br.Discarded = recs[max(from, 0):]
		if m.opts.OnFailure != nil {
			rec := m.invocationRecord(sh, res, br.Discarded)
			id, err := m.opts.OnFailure.send(ctx, rec)
			if err != nil {
				// The checkpoint stays: records are never dropped
				// without their invocation record.
				return err
			}
			br.Sent, br.SentMessageID = &rec, id
			sum.Sent++
		}
		sum.Discarded += len(br.Discarded)
		sh.done(recs)
	default:
		from = max(from, 0)
		if from > 0 {
			// Partial success: the records before it are done, and the
			// rest failed once.
			sh.attempts = 1
		}
		br.RetryFrom = recs[from].SequenceNumber()
		sum.Retries++
		if m.opts.BisectBatchOnFunctionError {
			sh.replace(recs[from:])
		} else {
			sh.pos = position{at: br.RetryFrom}
		}
	}
	if m.opts.OnBatch != nil {
		m.opts.OnBatch(br)
	}
	return nil
}

// failedFrom returns the index of the first record to retry, -1 when the
// batch succeeded, and why the batch failed as a whole (index 0) if it did.
// The response is read as for SQS (itemFailures): Lambda's success and
// failure conditions are the same for streams, keys matched in their case.
func (m *StreamMapping) failedFrom(res runtimeapi.Result, recs []StreamRecord) (int, error) {
	if res.Outcome != runtimeapi.OutcomeSuccess {
		return 0, fmt.Errorf("%w: %s", ErrInvocationFailed, res.Outcome)
	}
	if !m.opts.ReportBatchItemFailures {
		return -1, nil
	}
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[r.SequenceNumber()] = i
	}
	failed, err := itemFailures(res.Payload, func(id string) bool { _, ok := index[id]; return ok })
	if err != nil {
		return 0, err
	}
	// The lowest sequence number named is the checkpoint: in a shard's
	// batch, the first in the batch's order.
	first := -1
	for _, id := range failed {
		if first < 0 || index[id] < first {
			first = index[id]
		}
	}
	return first, nil
}
