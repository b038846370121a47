package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// dynamoEvent is a DynamoDB stream event of n INSERT records, sequence
// numbers 100, 200, ... as one shard gives them.
func dynamoEvent(n int) events.DynamoDBEvent {
	var ev events.DynamoDBEvent
	for i := range n {
		ev.Records = append(ev.Records, events.DynamoDBEventRecord{
			EventID: fmt.Sprintf("ev%d", i), EventName: "INSERT",
			Change: events.DynamoDBStreamRecord{SequenceNumber: fmt.Sprint((i + 1) * 100)},
		})
	}
	return ev
}

// kinesisEvent is dynamoEvent's Kinesis twin.
func kinesisEvent(n int) events.KinesisEvent {
	var ev events.KinesisEvent
	for i := range n {
		seq := fmt.Sprint((i + 1) * 100)
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			EventID: "shardId-000000000000:" + seq,
			Kinesis: events.KinesisRecord{SequenceNumber: seq, PartitionKey: fmt.Sprintf("k%d", i%2)},
		})
	}
	return ev
}

// bothStreams runs the same scenario on both stream kinds: fail(seq)
// decides each record's fate, and the test gets the answer's identifiers
// and the records called.
func bothStreams(t *testing.T, n int, margin time.Duration, ctx func() (context.Context, context.CancelFunc),
	fail func(ctx context.Context, seq string) error, check func(t *testing.T, failed []string, called []string, err error)) {
	t.Helper()
	opts := func(o *lambdakit.StreamOptions) {
		o.Logger = lambdakittest.Logger(t)
		o.DeadlineMargin = margin
	}
	t.Run("DynamoDB", func(t *testing.T) {
		var s calls
		h := lambdakit.DynamoDBStreamBatch(func(ctx context.Context, rec *events.DynamoDBEventRecord) error {
			s.add(rec.Change.SequenceNumber)
			return fail(ctx, rec.Change.SequenceNumber)
		}, opts)
		c, cancel := ctx()
		defer cancel()
		resp, err := h(c, dynamoEvent(n))
		var failed []string
		for _, f := range resp.BatchItemFailures {
			failed = append(failed, f.ItemIdentifier)
		}
		check(t, failed, s.list(), err)
	})
	t.Run("Kinesis", func(t *testing.T) {
		var s calls
		h := lambdakit.KinesisBatch(func(ctx context.Context, rec *events.KinesisEventRecord) error {
			s.add(rec.Kinesis.SequenceNumber)
			return fail(ctx, rec.Kinesis.SequenceNumber)
		}, opts)
		c, cancel := ctx()
		defer cancel()
		resp, err := h(c, kinesisEvent(n))
		var failed []string
		for _, f := range resp.BatchItemFailures {
			failed = append(failed, f.ItemIdentifier)
		}
		check(t, failed, s.list(), err)
	})
}

func tenSeconds() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func seqs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i*100))
	}
	return out
}

func TestStreamBatchRunsEveryRecordInOrder(t *testing.T) {
	bothStreams(t, 5, time.Second, tenSeconds, func(context.Context, string) error { return nil },
		func(t *testing.T, failed, called []string, err error) {
			if err != nil || len(failed) != 0 || !slices.Equal(called, seqs(1, 5)) {
				t.Errorf("failed %v, called %v, error %v; want none failed, each called once in order", failed, called, err)
			}
		})
}

// The first failure ends the batch: Lambda retries from it, the records
// after it included, so they are not run now.
func TestStreamBatchStopsAtTheFirstFailure(t *testing.T) {
	for name, fail := range map[string]func(context.Context, string) error{
		"an error": func(_ context.Context, seq string) error {
			if seq == "300" || seq == "400" {
				return errors.New("downstream unavailable")
			}
			return nil
		},
		"a panic": func(_ context.Context, seq string) error {
			if seq == "300" {
				panic("bug")
			}
			return nil
		},
		"runtime.Goexit": func(_ context.Context, seq string) error {
			if seq == "300" {
				runtime.Goexit()
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			bothStreams(t, 5, time.Second, tenSeconds, fail, func(t *testing.T, failed, called []string, err error) {
				if err != nil || !slices.Equal(failed, []string{"300"}) || !slices.Equal(called, seqs(1, 3)) {
					t.Errorf("failed %v, called %v, error %v; want 300 named, and 400 and 500 not called", failed, called, err)
				}
			})
		})
	}
}

// At the deadline guard the running record is cancelled and named; a
// record that ignores its context is named all the same when the batch
// must answer, and the ones after it never start.
func TestStreamBatchAnswersBeforeTheDeadline(t *testing.T) {
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 600*time.Millisecond)
	}
	t.Run("a record that stops when cancelled", func(t *testing.T) {
		bothStreams(t, 3, 400*time.Millisecond, short, func(ctx context.Context, seq string) error {
			if seq == "200" {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, func(t *testing.T, failed, called []string, err error) {
			if err != nil || !slices.Equal(failed, []string{"200"}) || !slices.Equal(called, seqs(1, 2)) {
				t.Errorf("failed %v, called %v, error %v; want 200 named, 300 not called", failed, called, err)
			}
		})
	})
	t.Run("a record that ignores cancellation", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		bothStreams(t, 3, 400*time.Millisecond, short, func(ctx context.Context, seq string) error {
			if seq == "200" {
				select {
				case <-release:
				case <-time.After(5 * time.Second):
				}
			}
			return nil
		}, func(t *testing.T, failed, called []string, err error) {
			if err != nil || !slices.Equal(failed, []string{"200"}) || !slices.Equal(called, seqs(1, 2)) {
				t.Errorf("failed %v, called %v, error %v; want 200 named when the batch had to answer", failed, called, err)
			}
		})
	})
}

// A failed record without a sequence number cannot be named: the
// invocation fails, and Lambda retries the whole batch, as it does for an
// empty identifier.
func TestStreamBatchRecordWithoutSequenceNumber(t *testing.T) {
	ev := dynamoEvent(2)
	ev.Records[1].Change.SequenceNumber = ""
	h := lambdakit.DynamoDBStreamBatch(func(ctx context.Context, rec *events.DynamoDBEventRecord) error {
		if rec.EventID == "ev1" {
			return errors.New("boom")
		}
		return nil
	}, func(o *lambdakit.StreamOptions) { o.Logger = lambdakittest.Logger(t) })
	resp, err := h(context.Background(), ev)
	if !errors.Is(err, lambdakit.ErrNoSequenceNumber) || len(resp.BatchItemFailures) != 0 {
		t.Errorf("response %v, error %v; want ErrNoSequenceNumber and no identifier", resp.BatchItemFailures, err)
	}
}

// The failed record's line says which record, why, and how many records
// after it were left for the retry.
func TestStreamBatchLogsTheFailure(t *testing.T) {
	var log lambdakittest.LogBuffer
	h := lambdakit.KinesisBatch(func(ctx context.Context, rec *events.KinesisEventRecord) error {
		if rec.Kinesis.SequenceNumber == "200" {
			return errors.New("downstream unavailable")
		}
		return nil
	}, func(o *lambdakit.StreamOptions) { o.Logger = lambdakit.NewLogger(&log) })
	if _, err := h(context.Background(), kinesisEvent(4)); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	for _, want := range []string{`"msg":"record failed"`, `"sequenceNumber":"200"`, `"eventId":"shardId-000000000000:200"`,
		`"partitionKey":"k1"`, `"reason":"downstream unavailable"`, `"notProcessed":2`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s; want %s", out, want)
		}
	}
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("%d lines at the default level; want the failure's only:\n%s", n, out)
	}
}
