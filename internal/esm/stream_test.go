package esm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// streamHarness is a table with a stream on moto_server, and testdata/streamfn
// under a Runner, its delivery counts and log in a folder of its own.
type streamHarness struct {
	t         *testing.T
	db        *dynamodb.Client
	streams   *dynamodbstreams.Client
	table     string
	streamARN string
	dir       string
	runner    *runtimeapi.Runner
	output    *logline.Buffer
}

func newStreamHarness(t *testing.T, bootstrap string) *streamHarness {
	cfg := moto.Config(t)
	h := &streamHarness{t: t, db: dynamodb.NewFromConfig(cfg), streams: dynamodbstreams.NewFromConfig(cfg),
		dir: t.TempDir(), output: &logline.Buffer{}}
	h.table, h.streamARN = testenv.StreamTable(t, h.db, "", "id")
	var err error
	h.runner, err = runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.Timeout = 5 * time.Second
		o.Env = []string{"STREAMFN_DIR=" + h.dir}
		o.Stdout, o.Stderr = h.output, h.output
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.runner.Close()
		if t.Failed() {
			t.Logf("function output:\n%s", h.output.String())
		}
	})
	return h
}

// put writes items id0, id1, ... with the commands given, in order.
func (h *streamHarness) put(cmds ...string) {
	h.t.Helper()
	for i, c := range cmds {
		if _, err := h.db.PutItem(h.t.Context(), &dynamodb.PutItemInput{TableName: aws.String(h.table), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("id%d", i)}, "cmd": &types.AttributeValueMemberS{Value: c},
		}}); err != nil {
			h.t.Fatal(err)
		}
	}
}

// run runs the mapping until the stream is empty, within 30 s.
func (h *streamHarness) run(optFns ...func(*esm.StreamOptions)) (esm.StreamSummary, []esm.StreamBatchResult) {
	h.t.Helper()
	var batches []esm.StreamBatchResult
	m, err := esm.NewStream(h.streams, h.streamARN, h.runner, append([]func(*esm.StreamOptions){func(o *esm.StreamOptions) {
		o.UntilEmpty = true
		o.OnBatch = func(b esm.StreamBatchResult) { batches = append(batches, b) }
	}}, optFns...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := m.Run(ctx)
	if err != nil || !sum.Empty {
		h.t.Fatalf("Run: %+v, %v; want the stream read to its end", sum, err)
	}
	return sum, batches
}

// deliveries returns, per record in stream order, how often the function
// got it: the log's "SEQ N" lines.
func (h *streamHarness) deliveries() (seqs []string, times map[string]int) {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "log"))
	if err != nil && !os.IsNotExist(err) {
		h.t.Fatal(err)
	}
	times = map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		seq, _, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		if times[seq] == 0 {
			seqs = append(seqs, seq)
		}
		times[seq]++
	}
	return seqs, times
}

func TestStreamMapping(t *testing.T) {
	bootstrap := testenv.Build(t, "./testdata/streamfn")

	t.Run("every record once, in order, in batches of BatchSize", func(t *testing.T) {
		h := newStreamHarness(t, bootstrap)
		h.put("ok", "ok", "ok", "ok", "ok")
		sum, batches := h.run(func(o *esm.StreamOptions) { o.BatchSize = 2; o.ReportBatchItemFailures = true })
		seqs, times := h.deliveries()
		if sum.Invocations != 3 || sum.Records != 5 || sum.Retries != 0 || len(batches) != 3 || len(batches[0].Records) != 2 {
			t.Errorf("summary %+v, %d batches; want 3 invocations (2, 2, 1) of 5 records, no retry", sum, len(batches))
		}
		if len(seqs) != 5 || !slices.IsSortedFunc(seqs, compareSeq) {
			t.Errorf("records %v; want 5, in stream order", seqs)
		}
		for s, n := range times {
			if n != 1 {
				t.Errorf("record %s delivered %d times; want once", s, n)
			}
		}
	})

	t.Run("a named record is retried from, the ones before it not", func(t *testing.T) {
		h := newStreamHarness(t, bootstrap)
		h.put("ok", "fail@1", "ok")
		sum, batches := h.run(func(o *esm.StreamOptions) { o.ReportBatchItemFailures = true })
		seqs, times := h.deliveries()
		if sum.Invocations != 2 || sum.Retries != 1 || len(seqs) != 3 {
			t.Fatalf("summary %+v, records %v; want 2 invocations, 1 retry, 3 records", sum, seqs)
		}
		if times[seqs[0]] != 1 || times[seqs[1]] != 2 || times[seqs[2]] != 1 || batches[0].RetryFrom != seqs[1] {
			t.Errorf("deliveries %v, first batch retried from %q; want the first once, the named one twice, the third once (not reached the first time), retry from %s",
				times, batches[0].RetryFrom, seqs[1])
		}
	})

	t.Run("a function error, a crash or an unknown identifier retries the whole batch", func(t *testing.T) {
		for _, cmd := range []string{"error@1", "crash@1", "badid@1"} {
			h := newStreamHarness(t, bootstrap)
			h.put("ok", cmd, "ok")
			sum, batches := h.run(func(o *esm.StreamOptions) { o.ReportBatchItemFailures = true })
			seqs, times := h.deliveries()
			if sum.Retries != 1 || len(seqs) != 3 || times[seqs[0]] != 2 || batches[0].Err == nil || batches[0].RetryFrom != seqs[0] {
				t.Errorf("%s: summary %+v, deliveries %v, first batch %v retried from %q; want the whole batch again from its first record", cmd, sum, times, batches[0].Err, batches[0].RetryFrom)
			}
		}
	})

	t.Run("without ReportBatchItemFailures the answer is not read", func(t *testing.T) {
		h := newStreamHarness(t, bootstrap)
		h.put("ok", "fail@1", "ok")
		sum, _ := h.run()
		if sum.Retries != 0 || sum.Invocations != 1 {
			t.Errorf("summary %+v; want one invocation and no retry: the named record is lost, as on Lambda", sum)
		}
	})

	t.Run("after MaximumRetryAttempts the rest of the batch is discarded", func(t *testing.T) {
		h := newStreamHarness(t, bootstrap)
		h.put("ok", "fail@100", "ok", "ok")
		sum, batches := h.run(func(o *esm.StreamOptions) {
			o.ReportBatchItemFailures = true
			o.MaximumRetryAttempts = 2
			o.BatchSize = 2
		})
		seqs, times := h.deliveries()
		last := batches[len(batches)-1]
		if sum.Discarded != 2 || times[seqs[1]] != 3 {
			t.Errorf("summary %+v, deliveries %v; want the named record delivered 3 times (1 + 2 retries), then it and the record after it discarded", sum, times)
		}
		// id2 was discarded with id1, never delivered: the function stops
		// at the first failure of a batch.
		if len(last.Records) != 1 || last.Records[0].Change.NewImage["id"].String() != "id3" || times[last.Records[0].Change.SequenceNumber] != 1 {
			t.Errorf("last batch %v, deliveries %v; want the shard to go on past the discarded records: id3 delivered once", last.Records, times)
		}
	})
}

// compareSeq orders sequence numbers, decimal strings of any length.
func compareSeq(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
