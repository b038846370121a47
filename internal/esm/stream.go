package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// A DynamoDB stream's event source mapping, as Lambda runs it: each shard
// is read in order from a checkpoint, a batch of up to BatchSize records at
// a time. A batch that succeeds moves the checkpoint past it. A batch that
// fails is retried from the checkpoint: the whole batch after a function
// error, a crash or a timeout; with ReportBatchItemFailures, from the lowest
// sequence number the function named (an empty or unknown identifier
// fails the whole batch). After MaximumRetryAttempts retries, the records
// from the checkpoint to the batch's end are discarded (Lambda sends them
// to the on-failure destination) and the shard goes on.

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
	// UntilEmpty stops Run once every shard has no record past its
	// checkpoint.
	UntilEmpty bool
	// PollInterval is the pause after a round of reads that found nothing.
	PollInterval time.Duration
	// Region is the records' awsRegion.
	Region string
	// OnBatch, if set, is called after each batch, one at a time.
	OnBatch func(StreamBatchResult)
}

// StreamBatchResult is what became of one batch.
type StreamBatchResult struct {
	Shard   string
	Records []events.DynamoDBEventRecord
	Result  runtimeapi.Result
	// Attempt is the batch's delivery from its first record: 1, then 2 on
	// its first retry, and so on.
	Attempt int
	// RetryFrom is the sequence number the shard is read again from, or ""
	// when the batch succeeded or was discarded.
	RetryFrom string
	// Discarded holds the records given up on after MaximumRetryAttempts.
	Discarded []events.DynamoDBEventRecord
	// Err says why the batch failed as a whole, if it did.
	Err error
}

// StreamSummary is what Run did.
type StreamSummary struct {
	Invocations int
	Records     int // records delivered, each delivery counted
	Retries     int // batches read again from a checkpoint
	Discarded   int // records given up on
	Empty       bool
}

// StreamMapping is a DynamoDB stream's event source mapping.
type StreamMapping struct {
	client    ddbstream.API
	streamARN string
	invoker   Invoker
	opts      StreamOptions
}

// NewStream returns the mapping of the stream streamARN to invoker.
func NewStream(client ddbstream.API, streamARN string, invoker Invoker, optFns ...func(*StreamOptions)) (*StreamMapping, error) {
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
	switch {
	case o.BatchSize < 1 || o.BatchSize > MaxStreamBatchSize:
		return nil, &OptionError{Option: "BatchSize", Reason: fmt.Sprintf("%d: want 1 to %d", o.BatchSize, MaxStreamBatchSize)}
	case o.MaximumRetryAttempts < -1 || o.MaximumRetryAttempts > MaxStreamRetryAttempts:
		return nil, &OptionError{Option: "MaximumRetryAttempts", Reason: fmt.Sprintf("%d: want -1 to %d", o.MaximumRetryAttempts, MaxStreamRetryAttempts)}
	case streamARN == "":
		return nil, &OptionError{Option: "streamARN", Reason: "empty"}
	}
	return &StreamMapping{client: client, streamARN: streamARN, invoker: invoker, opts: o}, nil
}

// shardState is a shard's checkpoint and the retries at it.
type shardState struct {
	id       string
	after    string // read after this sequence number ("": from StartingPosition)
	at       string // or, when set, read again from this one (a retry)
	attempts int    // deliveries of the batch starting at the checkpoint
}

// Run reads the shards and invokes the function until ctx ends, every
// shard is empty (with UntilEmpty), or an error stops it. Function
// failures are not errors: they are retried, counted and reported. An
// error means the stream could not be read (wrapping ErrStream) or the
// Invoker failed.
func (m *StreamMapping) Run(ctx context.Context) (StreamSummary, error) {
	var sum StreamSummary
	var shards []*shardState
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(m.streamARN)}
	for range 1000 {
		out, err := m.client.DescribeStream(ctx, in)
		if err != nil {
			return sum, fmt.Errorf("%w: describe %s: %w", ErrStream, m.streamARN, err)
		}
		for _, sh := range out.StreamDescription.Shards {
			shards = append(shards, &shardState{id: aws.ToString(sh.ShardId)})
		}
		if out.StreamDescription.LastEvaluatedShardId == nil {
			break
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
	for ctx.Err() == nil {
		found := false
		for _, sh := range shards {
			recs, err := m.read(ctx, sh)
			if err != nil {
				if ctx.Err() != nil {
					return sum, nil
				}
				return sum, err
			}
			if len(recs) == 0 {
				continue
			}
			found = true
			if err := m.deliver(ctx, sh, recs, &sum); err != nil {
				return sum, err
			}
		}
		if !found {
			if m.opts.UntilEmpty {
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

// ErrStream means the stream could not be read.
var ErrStream = errors.New("esm: the stream cannot be read")

// read returns up to BatchSize records of sh from its checkpoint.
func (m *StreamMapping) read(ctx context.Context, sh *shardState) ([]events.DynamoDBEventRecord, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(m.streamARN), ShardId: aws.String(sh.id)}
	switch {
	case sh.at != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(sh.at)
	case sh.after != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(sh.after)
	default:
		// A shard is first read from its oldest record: StartingPosition
		// TRIM_HORIZON, which an outbox's relay needs. LATEST is not
		// played.
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	}
	it, err := m.client.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, sh.id, err)
	}
	out, err := m.client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(int32(m.opts.BatchSize))})
	if err != nil {
		return nil, fmt.Errorf("%w: shard %s: %w", ErrStream, sh.id, err)
	}
	recs := make([]events.DynamoDBEventRecord, 0, len(out.Records))
	for _, r := range out.Records {
		recs = append(recs, ddbstream.Record(r, m.streamARN, m.opts.Region))
	}
	return recs, nil
}

// deliver invokes the function on recs, the batch at sh's checkpoint, and
// moves the checkpoint as Lambda would.
func (m *StreamMapping) deliver(ctx context.Context, sh *shardState, recs []events.DynamoDBEventRecord, sum *StreamSummary) error {
	event, err := json.Marshal(events.DynamoDBEvent{Records: recs})
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
	switch {
	case ferr == nil && from < 0: // success
		sh.after, sh.at, sh.attempts = recs[len(recs)-1].Change.SequenceNumber, "", 0
	case m.opts.MaximumRetryAttempts >= 0 && sh.attempts > m.opts.MaximumRetryAttempts:
		br.Err = ferr
		br.Discarded = recs[max(from, 0):]
		sum.Discarded += len(br.Discarded)
		sh.after, sh.at, sh.attempts = recs[len(recs)-1].Change.SequenceNumber, "", 0
	default:
		br.Err = ferr
		if from < 0 {
			from = 0
		}
		if from > 0 {
			// Partial success: the records before it are done, and the
			// retry is a new batch from the named record.
			sh.attempts = 1
		}
		sh.at = recs[from].Change.SequenceNumber
		br.RetryFrom = sh.at
		sum.Retries++
	}
	if m.opts.OnBatch != nil {
		m.opts.OnBatch(br)
	}
	return nil
}

// failedFrom returns the index of the first record to retry, -1 when the
// batch succeeded, and why the batch failed as a whole (index 0) if it did.
func (m *StreamMapping) failedFrom(res runtimeapi.Result, recs []events.DynamoDBEventRecord) (int, error) {
	if res.Outcome != runtimeapi.OutcomeSuccess {
		return 0, fmt.Errorf("%w: %s", ErrInvocationFailed, res.Outcome)
	}
	if !m.opts.ReportBatchItemFailures {
		return -1, nil
	}
	var resp struct {
		BatchItemFailures []struct {
			ItemIdentifier *string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if len(res.Payload) == 0 || string(res.Payload) == "null" {
		return -1, nil
	}
	if err := json.Unmarshal(res.Payload, &resp); err != nil {
		return 0, fmt.Errorf("%w: the answer is not a partial batch response: %v", ErrInvocationFailed, err)
	}
	first := -1
	for _, f := range resp.BatchItemFailures {
		id := aws.ToString(f.ItemIdentifier)
		i := slices.IndexFunc(recs, func(r events.DynamoDBEventRecord) bool { return r.Change.SequenceNumber == id })
		if id == "" || i < 0 {
			return 0, fmt.Errorf("%w: itemIdentifier %q is not a sequence number of the batch", ErrInvocationFailed, id)
		}
		if first < 0 || i < first {
			first = i
		}
	}
	return first, nil
}
