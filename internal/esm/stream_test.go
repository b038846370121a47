package esm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// streamHarness is a stream on moto_server (a table's DynamoDB stream or a
// Kinesis data stream), and testdata/streamfn under a Runner, its delivery
// counts, events and log in a folder of its own.
type streamHarness struct {
	t         *testing.T
	streamARN string
	dir       string
	runner    *runtimeapi.Runner
	output    *logline.Buffer
	sqs       *sqs.Client
	kinesis   *kinesis.Client // a Kinesis harness's
	// put writes records with the commands given, in order, and returns
	// their sequence numbers when the stream says them (Kinesis).
	put func(cmds ...string) []string
	// mapping maps the stream to the runner.
	mapping func(optFns ...func(*esm.StreamOptions)) (*esm.StreamMapping, error)
}

func newHarnessBase(t *testing.T, bootstrap string) *streamHarness {
	h := &streamHarness{t: t, dir: t.TempDir(), output: &logline.Buffer{}, sqs: sqs.NewFromConfig(moto.Config(t))}
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

// newStreamHarness has a table's DynamoDB stream; put writes items id0,
// id1, ... with the commands in "cmd".
func newStreamHarness(t *testing.T, bootstrap string) *streamHarness {
	h := newHarnessBase(t, bootstrap)
	cfg := moto.Config(t)
	db, streams := dynamodb.NewFromConfig(cfg), dynamodbstreams.NewFromConfig(cfg)
	table, arn := testenv.StreamTable(t, db, "", "id")
	h.streamARN = arn
	h.put = func(cmds ...string) []string {
		t.Helper()
		for i, c := range cmds {
			if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("id%d", i)}, "cmd": &types.AttributeValueMemberS{Value: c},
			}}); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	}
	h.mapping = func(optFns ...func(*esm.StreamOptions)) (*esm.StreamMapping, error) {
		return esm.NewStream(streams, h.streamARN, h.runner, optFns...)
	}
	return h
}

// newKinesisHarness has a Kinesis data stream of shards shards; put writes
// records whose data is the command, partition key "k".
func newKinesisHarness(t *testing.T, bootstrap string, shards int32) *streamHarness {
	h := newHarnessBase(t, bootstrap)
	client := kinesis.NewFromConfig(moto.Config(t))
	h.kinesis = client
	h.streamARN = testenv.KinesisStream(t, client, shards)
	h.put = func(cmds ...string) []string {
		t.Helper()
		var seqs []string
		for _, c := range cmds {
			out, err := client.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamARN: aws.String(h.streamARN), PartitionKey: aws.String("k"), Data: []byte(c)})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, aws.ToString(out.SequenceNumber))
		}
		return seqs
	}
	h.mapping = func(optFns ...func(*esm.StreamOptions)) (*esm.StreamMapping, error) {
		return esm.NewKinesisStream(client, h.streamARN, h.runner, optFns...)
	}
	return h
}

// run runs the mapping until the stream is empty, within 30 s.
func (h *streamHarness) run(optFns ...func(*esm.StreamOptions)) (esm.StreamSummary, []esm.StreamBatchResult) {
	h.t.Helper()
	var batches []esm.StreamBatchResult
	m, err := h.mapping(append([]func(*esm.StreamOptions){func(o *esm.StreamOptions) {
		o.UntilEmpty = true
		o.Region = "us-east-1"
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

// TestStreamMapping plays Lambda's rules for streams on both kinds of
// stream, with one shard.
func TestStreamMapping(t *testing.T) {
	bootstrap := testenv.Build(t, "./testdata/streamfn")
	for _, kind := range []struct {
		name string
		new  func(t *testing.T) *streamHarness
	}{
		{"DynamoDB", func(t *testing.T) *streamHarness { return newStreamHarness(t, bootstrap) }},
		{"Kinesis", func(t *testing.T) *streamHarness { return newKinesisHarness(t, bootstrap, 1) }},
	} {
		t.Run(kind.name, func(t *testing.T) { testStreamRules(t, kind.new) })
	}
}

func testStreamRules(t *testing.T, newHarness func(t *testing.T) *streamHarness) {

	t.Run("every record once, in order, in batches of BatchSize", func(t *testing.T) {
		h := newHarness(t)
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
		h := newHarness(t)
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

	// "Success and failure conditions" of "Configuring partial batch
	// response with Kinesis Data Streams and Lambda" (and its DynamoDB
	// twin): an itemIdentifier with a bad key name, as an unknown one,
	// fails the batch whole; keys are matched in their case
	// ("ItemIdentifier" is a bad key name), as FailedRecords does for SQS.
	t.Run("a function error, a crash, an unknown identifier or a bad key name retries the whole batch", func(t *testing.T) {
		for _, cmd := range []string{"error@1", "crash@1", "badid@1", "badkey@1"} {
			h := newHarness(t)
			h.put("ok", cmd, "ok")
			sum, batches := h.run(func(o *esm.StreamOptions) { o.ReportBatchItemFailures = true })
			seqs, times := h.deliveries()
			if sum.Retries != 1 || len(seqs) != 3 || times[seqs[0]] != 2 || batches[0].Err == nil || batches[0].RetryFrom != seqs[0] {
				t.Errorf("%s: summary %+v, deliveries %v, first batch %v retried from %q; want the whole batch again from its first record", cmd, sum, times, batches[0].Err, batches[0].RetryFrom)
			}
		}
	})

	// The same section: a null batchItemFailures list, or an empty
	// response, is a complete success. A response whose list is under
	// "BatchItemFailures" has no batchItemFailures list: AWS does not name
	// this case, it follows from the rule for a null list (and is what
	// FailedRecords does for SQS). A local run must not retry a record that
	// Lambda would let go.
	t.Run("a list under a key in other case is not read: the named record is lost, as on Lambda", func(t *testing.T) {
		h := newHarness(t)
		h.put("ok", "badlist@1", "ok")
		sum, batches := h.run(func(o *esm.StreamOptions) { o.ReportBatchItemFailures = true })
		if sum.Retries != 0 || sum.Invocations != 1 || batches[0].Err != nil {
			t.Errorf("summary %+v, first batch %v; want one invocation, no retry: Lambda finds no batchItemFailures", sum, batches[0].Err)
		}
	})

	t.Run("without ReportBatchItemFailures the answer is not read", func(t *testing.T) {
		h := newHarness(t)
		h.put("ok", "fail@1", "ok")
		sum, _ := h.run()
		if sum.Retries != 0 || sum.Invocations != 1 {
			t.Errorf("summary %+v; want one invocation and no retry: the named record is lost, as on Lambda", sum)
		}
	})

	t.Run("records the filter does not match are consumed without an invocation", func(t *testing.T) {
		// One pattern for both kinds: a DynamoDB record's new image, or a
		// Kinesis record's data as a plain string.
		filter, err := eventfilter.New(`{"$or":[{"dynamodb":{"NewImage":{"cmd":{"S":["ok"]}}}},{"data":["ok"]}]}`)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t)
		h.put("skip", "ok", "skip", "skip")
		// The second batch is filtered out whole: Run ends only if the
		// checkpoint moved past it.
		sum, batches := h.run(func(o *esm.StreamOptions) { o.BatchSize = 2; o.ReportBatchItemFailures = true; o.Filter = filter })
		seqs, _ := h.deliveries()
		if sum.Invocations != 1 || sum.Records != 1 || sum.Filtered != 3 || len(seqs) != 1 || len(batches) != 1 || len(batches[0].Records) != 1 {
			t.Errorf("summary %+v, records delivered %v; want one invocation with the one record kept, 3 filtered out", sum, seqs)
		}
	})

	t.Run("after MaximumRetryAttempts the rest of the batch is discarded", func(t *testing.T) {
		h := newHarness(t)
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
		// The third record was discarded with the second, never
		// delivered: the function stops at the first failure of a batch.
		if len(seqs) != 3 || len(last.Records) != 1 || last.Records[0].SequenceNumber() != seqs[2] || times[seqs[2]] != 1 {
			t.Errorf("records delivered %v, last batch %v, deliveries %v; want the shard to go on past the discarded records: the fourth delivered once", seqs, last.Records, times)
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

// A Kinesis stream of two shards: each shard's records in order, in
// batches of one shard, each once, in the event Lambda sends.
func TestKinesisShards(t *testing.T) {
	h := newKinesisHarness(t, testenv.Build(t, "./testdata/streamfn"), 2)
	// moto numbers each shard's records 1, 2, ...: unlike Kinesis's, its
	// sequence numbers are unique in a shard only, so records are told
	// apart by shard and sequence number.
	perShard := map[string][]string{}
	for i := range 12 {
		out, err := h.kinesis.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamARN: aws.String(h.streamARN), PartitionKey: aws.String(fmt.Sprint("key-", i)), Data: []byte("ok")})
		if err != nil {
			t.Fatal(err)
		}
		seq, shard := aws.ToString(out.SequenceNumber), aws.ToString(out.ShardId)
		perShard[shard] = append(perShard[shard], seq)
	}
	if len(perShard) != 2 {
		t.Fatalf("records by shard %v; want records in both shards (moto hashes partition keys as Kinesis does)", perShard)
	}
	sum, batches := h.run(func(o *esm.StreamOptions) { o.BatchSize = 4; o.ReportBatchItemFailures = true })
	if sum.Records != 12 || sum.Retries != 0 {
		t.Errorf("summary %+v; want 12 records, no retry", sum)
	}
	got := map[string][]string{}
	for _, b := range batches {
		for _, r := range b.Records {
			if r.KinesisEventRecord.EventID != b.Shard+":"+r.SequenceNumber() {
				t.Errorf("batch of shard %s has record %s", b.Shard, r.KinesisEventRecord.EventID)
			}
			got[b.Shard] = append(got[b.Shard], r.SequenceNumber())
		}
	}
	for shard, want := range perShard {
		if !slices.Equal(got[shard], want) {
			t.Errorf("shard %s delivered %v; want %v, each once, in order", shard, got[shard], want)
		}
	}

	// The event as the function got it.
	b, err := os.ReadFile(filepath.Join(h.dir, "events"))
	if err != nil {
		t.Fatal(err)
	}
	var ev struct{ Records []map[string]any }
	if err := json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &ev); err != nil || len(ev.Records) == 0 {
		t.Fatalf("first event %q: %v", b, err)
	}
	rec := ev.Records[0]
	kin, _ := rec["kinesis"].(map[string]any)
	seq, _ := kin["sequenceNumber"].(string)
	first := batches[0].Shard
	account := strings.Split(h.streamARN, ":")[4]
	for field, want := range map[string]any{
		"eventSource": "aws:kinesis", "eventName": "aws:kinesis:record", "eventVersion": "1.0", "awsRegion": "us-east-1",
		"eventSourceARN": h.streamARN, "eventID": first + ":" + seq,
		"invokeIdentityArn": "arn:aws:iam::" + account + ":role/lambdakit-local",
	} {
		if rec[field] != want {
			t.Errorf("%s is %v; want %v", field, rec[field], want)
		}
	}
	for field, want := range map[string]any{"data": "b2s=", "partitionKey": "key-", "kinesisSchemaVersion": "1.0"} {
		if v, _ := kin[field].(string); !strings.HasPrefix(v, want.(string)) {
			t.Errorf("kinesis.%s is %v; want %v", field, kin[field], want)
		}
	}
	if ts, ok := kin["approximateArrivalTimestamp"].(float64); !ok || time.Since(time.Unix(int64(ts), 0)) > time.Hour {
		t.Errorf("kinesis.approximateArrivalTimestamp is %v; want the arrival in epoch seconds", kin["approximateArrivalTimestamp"])
	}
}

// streamKinds runs test on a DynamoDB stream and on a Kinesis stream of one
// shard.
func streamKinds(t *testing.T, test func(t *testing.T, h *streamHarness, infoField string)) {
	bootstrap := testenv.Build(t, "./testdata/streamfn")
	t.Run("DynamoDB", func(t *testing.T) { test(t, newStreamHarness(t, bootstrap), "DDBStreamBatchInfo") })
	t.Run("Kinesis", func(t *testing.T) { test(t, newKinesisHarness(t, bootstrap, 1), "KinesisBatchInfo") })
}

// onFailure returns a queue for invocation records and a function that
// takes them off it.
func (h *streamHarness) onFailure() (*esm.SQSDestination, func() []map[string]any) {
	url := testenv.Queue(h.t, h.sqs, false, nil)
	return &esm.SQSDestination{Client: h.sqs, QueueURL: url}, func() []map[string]any {
		var recs []map[string]any
		for _, msg := range testenv.Drain(h.t, h.sqs, url) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(aws.ToString(msg.Body)), &rec); err != nil {
				h.t.Fatalf("invocation record %s: %v", aws.ToString(msg.Body), err)
			}
			recs = append(recs, rec)
		}
		return recs
	}
}

// A poison record in the middle of a batch of 8: with bisection every
// other record is delivered and succeeds, and the poison alone is
// discarded, its invocation record sent; without it, the records after the
// poison are lost with it.
func TestStreamBisect(t *testing.T) {
	streamKinds(t, func(t *testing.T, h *streamHarness, infoField string) {
		cmds := []string{"ok", "ok", "ok", "ok", "error@100", "ok", "ok", "ok"}
		h.put(cmds...)
		dest, received := h.onFailure()
		sum, batches := h.run(func(o *esm.StreamOptions) {
			o.BatchSize = 8
			o.ReportBatchItemFailures = true
			o.MaximumRetryAttempts = 1
			o.BisectBatchOnFunctionError = true
			o.OnFailure = dest
		})
		seqs, times := h.deliveries()
		if len(seqs) != 8 {
			t.Fatalf("records delivered %v; want all 8", seqs)
		}
		poison := seqs[4]
		succeeded := map[string]bool{}
		for _, b := range batches {
			if b.Err == nil && b.RetryFrom == "" {
				for _, r := range b.Records {
					succeeded[r.SequenceNumber()] = true
				}
			}
		}
		for i, s := range seqs {
			if i != 4 && !succeeded[s] {
				t.Errorf("record %d (%s) never succeeded; deliveries %v", i, s, times)
			}
		}
		// 8 fails, split 4+4; 4..7 fails, split 2+2; 4,5 fails, split
		// 1+1; the poison alone is delivered 1 + 1 retry (splits consume
		// no retries), then discarded.
		if sum.Bisections != 3 || sum.Discarded != 1 || sum.Sent != 1 || sum.Invocations != 8 || times[poison] != 5 {
			t.Errorf("summary %+v, poison delivered %d times; want 3 bisections, 8 invocations, the poison delivered 5 times (3 in halves, 2 alone) and discarded alone", sum, times[poison])
		}
		recs := received()
		if len(recs) != 1 {
			t.Fatalf("invocation records %v; want one", recs)
		}
		rec := recs[0]
		info, _ := rec[infoField].(map[string]any)
		req, _ := rec["requestContext"].(map[string]any)
		resp, _ := rec["responseContext"].(map[string]any)
		last := batches[len(batches)-1]
		for name, c := range map[string]struct{ got, want any }{
			"batchSize":              {info["batchSize"], 1.0},
			"startSequenceNumber":    {info["startSequenceNumber"], poison},
			"endSequenceNumber":      {info["endSequenceNumber"], poison},
			"shardId":                {info["shardId"], last.Shard},
			"streamArn":              {info["streamArn"], h.streamARN},
			"condition":              {req["condition"], "RetryAttemptsExhausted"},
			"approximateInvokeCount": {req["approximateInvokeCount"], 2.0},
			"functionArn":            {req["functionArn"], "arn:aws:lambda:us-east-1:123456789012:function:function"},
			"statusCode":             {resp["statusCode"], 200.0},
			"functionError":          {resp["functionError"], "Unhandled"},
			"executedVersion":        {resp["executedVersion"], "$LATEST"},
			"version":                {rec["version"], "1.0"},
		} {
			if c.got != c.want {
				t.Errorf("%s is %v; want %v\nrecord %v", name, c.got, c.want, rec)
			}
		}
		for _, f := range []string{"approximateArrivalOfFirstRecord", "approximateArrivalOfLastRecord"} {
			if _, err := time.Parse(time.RFC3339, fmt.Sprint(info[f])); err != nil {
				t.Errorf("%s %v: %v", f, info[f], err)
			}
		}
		if _, err := time.Parse(time.RFC3339, fmt.Sprint(rec["timestamp"])); err != nil {
			t.Errorf("timestamp: %v", err)
		}
	})
}

// Without bisection a named poison record takes the rest of its batch with
// it: Lambda retries from it, and discards it and every record after it.
func TestStreamNoBisectLoses(t *testing.T) {
	streamKinds(t, func(t *testing.T, h *streamHarness, infoField string) {
		h.put("ok", "ok", "ok", "ok", "fail@100", "ok", "ok", "ok")
		dest, received := h.onFailure()
		sum, _ := h.run(func(o *esm.StreamOptions) {
			o.BatchSize = 8
			o.ReportBatchItemFailures = true
			o.MaximumRetryAttempts = 1
			o.OnFailure = dest
		})
		seqs, times := h.deliveries()
		if sum.Discarded != 4 || len(seqs) != 5 || times[seqs[4]] != 2 {
			t.Errorf("summary %+v, deliveries %v; want the poison delivered twice, then it and the 3 records after it discarded, never delivered", sum, times)
		}
		recs := received()
		if len(recs) != 1 {
			t.Fatalf("invocation records %v; want one", recs)
		}
		info, _ := recs[0][infoField].(map[string]any)
		resp, _ := recs[0]["responseContext"].(map[string]any)
		if info["batchSize"] != 4.0 || info["startSequenceNumber"] != seqs[4] || resp["functionError"] != nil {
			t.Errorf("invocation record %v; want batchSize 4 from the poison, no functionError (the invocation succeeded)", recs[0])
		}
	})
}

// With bisection a partial response splits the batch at the named record:
// the retry is exactly the records from it to the batch's end, where
// without it the retry reads a new batch from the named record.
func TestStreamBisectAtSequenceNumber(t *testing.T) {
	streamKinds(t, func(t *testing.T, h *streamHarness, _ string) {
		h.put("ok", "fail@1", "ok", "ok", "ok")
		_, batches := h.run(func(o *esm.StreamOptions) {
			o.BatchSize = 4
			o.ReportBatchItemFailures = true
			o.BisectBatchOnFunctionError = true
		})
		seqs, _ := h.deliveries()
		var sizes []int
		for _, b := range batches {
			sizes = append(sizes, len(b.Records))
		}
		if !slices.Equal(sizes, []int{4, 3, 1}) || batches[1].Records[0].SequenceNumber() != seqs[1] {
			t.Errorf("batches of %v records, the second from %s; want 4, then the 3 from the named record %s, then 1", sizes, batches[1].Records[0].SequenceNumber(), seqs[1])
		}
	})
}

// splittingStream is a DynamoDB stream whose shards split, behind our own
// ddbstream.API: moto's DynamoDB streams never split. Its shard list and
// records are what the test sets; sequence numbers are numbers of equal
// length, so that they compare as strings. A closed shard has an ending
// sequence number, and its iterator ends after its last record, as
// DynamoDB Streams documents.
type splittingStream struct {
	mu     sync.Mutex
	shards []ddbtypes.Shard
	recs   map[string][]string // shard -> sequence numbers, in order
	// onRead, if set, is called under mu before each read of a shard.
	onRead func(s *splittingStream, shard string)
}

// split closes parent and adds child, holding seqs.
func (s *splittingStream) split(parent, child string, seqs ...string) {
	for i, sh := range s.shards {
		if aws.ToString(sh.ShardId) == parent {
			last := s.recs[parent][len(s.recs[parent])-1]
			s.shards[i].SequenceNumberRange.EndingSequenceNumber = aws.String(last)
		}
	}
	s.shards = append(s.shards, ddbtypes.Shard{ShardId: aws.String(child), ParentShardId: aws.String(parent),
		SequenceNumberRange: &ddbtypes.SequenceNumberRange{StartingSequenceNumber: aws.String(seqs[0])}})
	s.recs[child] = seqs
}

func newSplittingStream(recs map[string][]string, ids ...string) *splittingStream {
	s := &splittingStream{recs: recs}
	for _, id := range ids {
		s.shards = append(s.shards, ddbtypes.Shard{ShardId: aws.String(id),
			SequenceNumberRange: &ddbtypes.SequenceNumberRange{StartingSequenceNumber: aws.String(recs[id][0])}})
	}
	return s
}

func (s *splittingStream) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shards := make([]ddbtypes.Shard, len(s.shards))
	for i, sh := range s.shards {
		r := *sh.SequenceNumberRange
		sh.SequenceNumberRange = &r
		shards[i] = sh
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &ddbtypes.StreamDescription{StreamArn: in.StreamArn, Shards: shards}}, nil
}

// An iterator is "shard type sequence-number".
func (s *splittingStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	it := aws.ToString(in.ShardId) + " " + string(in.ShardIteratorType) + " " + aws.ToString(in.SequenceNumber)
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(it)}, nil
}

func (s *splittingStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := strings.Split(aws.ToString(in.ShardIterator), " ")
	shard, typ, from := f[0], f[1], f[2]
	if s.onRead != nil {
		s.onRead(s, shard)
	}
	out := &dynamodbstreams.GetRecordsOutput{}
	last := from
	for _, seq := range s.recs[shard] {
		if len(out.Records) == int(aws.ToInt32(in.Limit)) {
			break
		}
		if (typ == "AFTER_SEQUENCE_NUMBER" && seq <= from) || (typ == "AT_SEQUENCE_NUMBER" && seq < from) {
			continue
		}
		out.Records = append(out.Records, ddbtypes.Record{EventID: aws.String("e" + seq), EventName: ddbtypes.OperationTypeInsert,
			Dynamodb: &ddbtypes.StreamRecord{SequenceNumber: aws.String(seq), Keys: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: seq}}}})
		last = seq
	}
	closed := false
	for _, sh := range s.shards {
		closed = closed || (aws.ToString(sh.ShardId) == shard && sh.SequenceNumberRange.EndingSequenceNumber != nil)
	}
	if !closed || len(out.Records) > 0 {
		out.NextShardIterator = aws.String(shard + " AFTER_SEQUENCE_NUMBER " + last)
	}
	return out, nil
}

// seqInvoker succeeds with every batch and keeps the sequence numbers it
// was given, in order.
type seqInvoker struct {
	mu   sync.Mutex
	seqs []string
}

func (i *seqInvoker) Invoke(_ context.Context, event []byte, _ ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(event, &ev); err != nil {
		return runtimeapi.Result{}, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range ev.Records {
		i.seqs = append(i.seqs, r.Change.SequenceNumber)
	}
	return runtimeapi.Result{Outcome: runtimeapi.OutcomeSuccess, Payload: []byte(`{}`)}, nil
}

// runSplitting maps s to a seqInvoker in batches of two until the stream is
// empty, and returns the sequence numbers delivered.
func runSplitting(t *testing.T, s *splittingStream) []string {
	t.Helper()
	inv := &seqInvoker{}
	m, err := esm.NewStream(s, "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000", inv, func(o *esm.StreamOptions) {
		o.BatchSize, o.UntilEmpty, o.PollInterval = 2, true, time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sum, err := m.Run(ctx)
	if err != nil || !sum.Empty {
		t.Fatalf("Run: %+v, %v; want the stream read to its end within 10s", sum, err)
	}
	return inv.seqs
}

// After a split, Lambda reads the parent shard to its end before its
// child: the child's records, newer, must not overtake the rest of the
// parent's, whatever order the stream lists the shards in.
func TestStreamReadsParentBeforeChild(t *testing.T) {
	for _, childFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("child listed first ", childFirst), func(t *testing.T) {
			s := newSplittingStream(map[string][]string{"p": {"100", "200", "300"}}, "p")
			s.split("p", "c", "400", "500")
			if childFirst {
				s.shards[0], s.shards[1] = s.shards[1], s.shards[0]
			}
			if got, want := runSplitting(t, s), []string{"100", "200", "300", "400", "500"}; !slices.Equal(got, want) {
				t.Errorf("delivered %v; want %v", got, want)
			}
		})
	}
}

// A shard created while the mapping runs is read: the shard list is read
// again, not kept from the start of the run.
func TestStreamReadsShardCreatedDuringRun(t *testing.T) {
	s := newSplittingStream(map[string][]string{"p": {"100", "200"}}, "p")
	s.onRead = func(s *splittingStream, shard string) {
		if shard == "p" && len(s.shards) == 1 {
			s.split("p", "c", "300")
		}
	}
	if got, want := runSplitting(t, s), []string{"100", "200", "300"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v; want %v", got, want)
	}
}

// moto's Kinesis splits shards for real: after a split, the parent's
// records reach the function before any of its children's, each once, and
// both children are read. (Plain moto 5.2.1 moves a split shard's records
// into its children; Kinesis keeps them in the parent, and so does the
// local stack's moto launcher.)
func TestKinesisSplitReadsParentFirst(t *testing.T) {
	h := newKinesisHarness(t, testenv.Build(t, "./testdata/streamfn"), 1)
	h.put("p1", "p2", "p3")
	list, err := h.kinesis.ListShards(t.Context(), &kinesis.ListShardsInput{StreamARN: aws.String(h.streamARN)})
	if err != nil || len(list.Shards) != 1 {
		t.Fatalf("ListShards: %v, %v", list, err)
	}
	parent := aws.ToString(list.Shards[0].ShardId)
	// The middle of the hash key range, 2^127.
	if _, err := h.kinesis.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamARN: aws.String(h.streamARN),
		ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
		t.Fatal(err)
	}
	children := map[string]bool{}
	for i := range 8 {
		out, err := h.kinesis.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamARN: aws.String(h.streamARN),
			PartitionKey: aws.String(fmt.Sprint("key-", i)), Data: []byte(fmt.Sprint("c", i))})
		if err != nil {
			t.Fatal(err)
		}
		children[aws.ToString(out.ShardId)] = true
	}
	if len(children) != 2 || children[parent] {
		t.Fatalf("records after the split went to shards %v; want both children of %s", children, parent)
	}

	_, batches := h.run(func(o *esm.StreamOptions) { o.BatchSize = 2 })
	var got []string
	read := map[string]bool{}
	for _, b := range batches {
		read[b.Shard] = true
		for _, r := range b.Records {
			got = append(got, string(r.Kinesis.Data))
		}
	}
	if len(got) != 11 || !slices.Equal(got[:3], []string{"p1", "p2", "p3"}) {
		t.Errorf("delivered %v; want p1 p2 p3 first, then the 8 records of the children, each once", got)
	}
	for child := range children {
		if !read[child] {
			t.Errorf("child shard %s was never read (shards read: %v)", child, read)
		}
	}
}

// A long run (no UntilEmpty) reads the shards a split makes while it runs:
// the records written to the children after the split reach the function.
func TestKinesisShardsSplitDuringARunAreRead(t *testing.T) {
	h := newKinesisHarness(t, testenv.Build(t, "./testdata/streamfn"), 1)
	h.put("p1")
	delivered := make(chan string, 100)
	m, err := h.mapping(func(o *esm.StreamOptions) {
		o.PollInterval = 20 * time.Millisecond
		o.OnBatch = func(b esm.StreamBatchResult) {
			for _, r := range b.Records {
				delivered <- string(r.Kinesis.Data)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := m.Run(ctx); done <- err }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// wait returns the next record delivered, within 10s.
	wait := func() string {
		t.Helper()
		select {
		case d := <-delivered:
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no record delivered within 10s")
			return ""
		}
	}
	if got := wait(); got != "p1" {
		t.Fatalf("first delivery %s; want p1", got)
	}
	list, err := h.kinesis.ListShards(t.Context(), &kinesis.ListShardsInput{StreamARN: aws.String(h.streamARN)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.kinesis.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamARN: aws.String(h.streamARN),
		ShardToSplit: list.Shards[0].ShardId, NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
		t.Fatal(err)
	}
	h.put("c1")
	if got := wait(); got != "c1" {
		t.Errorf("after the split, delivered %s; want c1, written to a child", got)
	}
}
