package dynamostore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The idempotency middleware on DynamoDB: how many requests each kind of
// record costs.
func TestIdempotentRequestCounts(t *testing.T) {
	f := setup(t)
	runs := 0
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.CacheSize = 10
		o.Logger = discardLogger()
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		runs++
		return []byte(`{"ok":true}`), nil
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	msg := lambdakittest.Message(`{"id":"order-1"}`)

	steps := []struct {
		name  string
		h     lambdakit.Handler
		calls map[string]int
	}{
		{"new record that completes", h, map[string]int{"PutItem": 1, "UpdateItem": 1}},
		{"warm-cache duplicate", h, map[string]int{}},
		// A second container has an empty cache: it asks the table.
		{"duplicate", lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
			o.Logger = discardLogger()
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			t.Error("handler ran for a duplicate")
			return nil, nil
		})), map[string]int{"PutItem": 1}},
	}
	for _, s := range steps {
		f.calls.Reset()
		got, err := s.h.Handle(ctx, &msg)
		if err != nil || string(got) != `{"ok":true}` {
			t.Fatalf("%s: got %s, %v; want the result", s.name, got, err)
		}
		f.checkCalls(t, s.calls)
	}
	if runs != 1 {
		t.Errorf("got %d runs; want 1", runs)
	}
}

// Single-phase mode on DynamoDB: the handler's own row and the completion
// commit in one TransactWriteItems, and a handler error commits neither.
func TestIdempotentStagedWritesOnDynamoDB(t *testing.T) {
	f := setup(t)
	fail := true
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Logger = discardLogger()
	})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(f.table),
			Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: "row#" + msg.Body},
			},
		}})
		if err != nil {
			return nil, err
		}
		if fail {
			return nil, context.DeadlineExceeded
		}
		return nil, nil
	}))
	msg := lambdakittest.Message(`{"id":"order-9"}`)
	if _, err := h.Handle(t.Context(), &msg); err == nil {
		t.Fatal("got success; want the handler's error")
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("got %d items after a failed handler; want 0 (no row, lock released)", n)
	}
	fail = false
	f.calls.Reset()
	if _, err := h.Handle(t.Context(), &msg); err != nil {
		t.Fatal(err)
	}
	f.checkCalls(t, map[string]int{"PutItem": 1, "TransactWriteItems": 1})
	if n := f.count(t); n != 2 {
		t.Errorf("got %d items; want the record and the row", n)
	}
}

// count returns how many items the table holds.
func (f *fixture) count(tb testing.TB) int {
	tb.Helper()
	out, err := f.db.Scan(tb.Context(), &dynamodb.ScanInput{TableName: aws.String(f.table)})
	if err != nil {
		tb.Fatal(err)
	}
	return len(out.Items)
}

// A completion DynamoDB refuses for good after the handler's work was
// done must not release the key: every later delivery would run the work
// again. The record is completed with the failure instead, and the
// message fails permanently. The refusal here is one no check before the
// work can foresee: a staged update that takes an item the table already
// holds past 400 KB.
func TestIdempotentCompletionRejectedOnDynamoDB(t *testing.T) {
	cases := map[string]func(t *testing.T, f *fixture, msg *events.SQSMessage) types.TransactWriteItem{
		"staged update past 400 KB": func(t *testing.T, f *fixture, msg *events.SQSMessage) types.TransactWriteItem {
			key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "row#" + msg.Body}}
			row := map[string]types.AttributeValue{"note": &types.AttributeValueMemberS{Value: strings.Repeat("x", 300_000)}}
			maps.Copy(row, key)
			if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: row}); err != nil {
				t.Error(err)
			}
			return types.TransactWriteItem{Update: &types.Update{
				TableName: aws.String(f.table), Key: key, UpdateExpression: aws.String("SET more = :more"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":more": &types.AttributeValueMemberS{Value: strings.Repeat("y", 200_000)}},
			}}
		},
	}
	for name, staged := range cases {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			charges := 0
			h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
				o.Logger = discardLogger()
			})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				charges++
				if err := dynamostore.Stage(ctx, staged(t, f, msg)); err != nil {
					return nil, err
				}
				return []byte(`"ch_1"`), nil
			}))
			msg := lambdakittest.Message(`{"id":"order-big"}`)
			for i := range 3 {
				_, err := h.Handle(t.Context(), &msg)
				if !errors.Is(err, lambdakit.ErrPermanent) || !errors.Is(err, lambdakit.ErrCompletionRejected) {
					t.Errorf("delivery %d: got %v; want a permanent ErrCompletionRejected", i+1, err)
				}
			}
			if charges != 1 {
				t.Errorf("got %d charges; want 1", charges)
			}
			id := "lambdakit#" + sha256Hex("order-big")
			item := f.record(t, id)
			if item == nil {
				t.Fatalf("record %s absent; want it kept, completed with its failure", id)
			}
			if got := str(t, item, "status"); got != "COMPLETED" {
				t.Errorf("status = %q; want COMPLETED", got)
			}
			if got := str(t, item, "failure"); got == "" {
				t.Errorf("failure attribute empty; want the reason the completion was rejected")
			}
			if _, ok := item["data"]; ok {
				t.Errorf("data = %v; want none (the work's result was not committed)", item["data"])
			}
		})
	}
}

// A staged put whose item passes DynamoDB's 400 KB is refused when staged,
// before the work, permanently: DynamoDB would refuse the completion on
// every try, after the work. The key is released, not completed with a
// failure, since the work never ran.
func TestIdempotentStagedPutOver400KBIsRefusedBeforeTheWork(t *testing.T) {
	f := setup(t)
	charges := 0
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Logger = discardLogger()
	})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
			"id":   &types.AttributeValueMemberS{Value: "row#big"},
			"note": &types.AttributeValueMemberS{Value: strings.Repeat("x", 410_000)},
		}}})
		if err != nil {
			return nil, err
		}
		charges++ // the card is charged
		return []byte(`"ch_1"`), nil
	}))
	msg := lambdakittest.Message(`{"id":"order-big-put"}`)
	_, err := h.Handle(t.Context(), &msg)
	if !errors.Is(err, lambdakit.ErrPermanent) || !errors.Is(err, lambdakit.ErrStagedTooLarge) {
		t.Errorf("got %v; want a permanent ErrStagedTooLarge", err)
	}
	if charges != 0 {
		t.Errorf("got %d charges; want none", charges)
	}
	if item := f.record(t, "lambdakit#"+sha256Hex("order-big-put")); item != nil {
		t.Errorf("record = %v; want none (released: the work never ran)", item)
	}
}

// lostAnswer is a retryable error for an attempt that took effect but whose
// answer never came back, as after a connection reset.
type lostAnswer struct{}

func (lostAnswer) Error() string        { return "answer lost" }
func (lostAnswer) RetryableError() bool { return true }

// The same, for real: a proxy between the SDK and moto loses the answer of
// the DeleteItem that landed, and before the SDK's retry another owner
// takes the freed key. While the releasing owner's lease had not ended,
// nobody could have taken the key unless its release had landed: the call
// fails with the handler's error alone, whatever the other owner did
// next, and whatever kind of record it left.
func TestReleaseWhoseAnswerWasLostBeforeAnotherOwnerTookTheKey(t *testing.T) {
	lost := testenv.DynamoDBError("InternalServerError", "answer lost by the test proxy")
	cases := map[string]func(t *testing.T, p *proxied, other *dynamostore.Store, id string){
		"an engine takes the key and completes it": func(t *testing.T, p *proxied, other *dynamostore.Store, id string) {
			p.proxy.LoseAnswerThen("DeleteItem", http.StatusInternalServerError, lost, func() {
				e := lambdakit.NewOnce(other, func(o *lambdakit.Options) { o.Prefix, o.Logger = "release", discardLogger() })
				if _, err := e.Do(testCtx(t), "order-9", nil, func(context.Context) ([]byte, error) { return []byte(`"B"`), nil }); err != nil {
					t.Errorf("the other owner: %v", err)
				}
			})
		},
		"a runtime that keeps no lease completes it": func(t *testing.T, p *proxied, _ *dynamostore.Store, id string) {
			// Powertools for AWS Lambda in another language, on the
			// same table: its records have no lease attribute.
			p.proxy.LoseAnswerThen("DeleteItem", http.StatusInternalServerError, lost, func() {
				putRaw(t, p.fixture, map[string]types.AttributeValue{
					"id":         &types.AttributeValueMemberS{Value: id},
					"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
					"expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)},
				})
			})
		},
		"an engine takes the key, and releases it before the holder is read": func(t *testing.T, p *proxied, other *dynamostore.Store, id string) {
			at := time.Now()
			rec := record(id, at)
			rec.Lease = fmt.Sprintf("%d.%s", at.UnixMilli(), rec.Lease) // an engine's token starts with its time
			p.proxy.LoseAnswerThen("DeleteItem", http.StatusInternalServerError, lost, func() {
				if _, ok, err := other.Acquire(testCtx(t), rec, at); err != nil || !ok {
					t.Errorf("the other owner could not take the key: %v", err)
				}
			})
			// The retried delete is refused; then, before the
			// releasing owner reads who holds the key, the other
			// owner's handler fails too and frees it.
			p.proxy.LoseAnswerThen("BatchGetItem", http.StatusInternalServerError, lost, func() {
				if err := other.Release(testCtx(t), id, rec.Lease); err != nil {
					t.Errorf("the other owner's release: %v", err)
				}
			})
		},
	}
	for name, arrange := range cases {
		t.Run(name, func(t *testing.T) {
			p := setupProxied(t, quickBackoff)
			id := "release#" + sha256Hex("order-9")
			arrange(t, p, newStore(t, p.db, p.table), id)
			declined := errors.New("declined")
			e := lambdakit.NewOnce(p.store, func(o *lambdakit.Options) { o.Prefix, o.Logger = "release", discardLogger() })
			_, err := e.Do(testCtx(t), "order-9", nil, func(context.Context) ([]byte, error) { return nil, declined })
			var leaseLost *lambdakit.LeaseLostError
			if errors.As(err, &leaseLost) || errors.Is(err, lambdakit.ErrLeaseLost) || !errors.Is(err, declined) {
				t.Errorf("got %v; want the handler's error alone: this owner released in time", err)
			}
			if n := p.proxy.Count("DeleteItem"); n != 2 {
				t.Errorf("got %d DeleteItem requests; want 2, the one whose answer was lost and the SDK's retry", n)
			}
		})
	}
}

// A release whose DeleteItem lands, whose answer is lost, and whose retry
// finds the key taken by another owner in the meantime was in time: the
// record must fail with the handler's error, not a lost lease.
func TestIdempotentReleaseWhoseAnswerWasLost(t *testing.T) {
	f := setup(t)
	db := local(t)
	other := newStore(t, db.Client(), f.table)
	var once sync.Once
	afterDelete := middleware.FinalizeMiddlewareFunc("loseFirstDeleteAnswer",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if err != nil || middleware.GetOperationName(ctx) != "DeleteItem" {
				return out, md, err
			}
			lost := false
			once.Do(func() { lost = true })
			if !lost {
				return out, md, err
			}
			// The delete landed; before the SDK's retry, another
			// owner takes the key.
			now := time.Now()
			rec := record("lambdakit#"+sha256Hex("order-7"), now)
			// An engine's lease token starts with when it acquired
			// the key, in epoch milliseconds.
			rec.Lease = fmt.Sprintf("%d.%s", now.UnixMilli(), rec.Lease)
			if _, ok, aerr := other.Acquire(ctx, rec, now); aerr != nil || !ok {
				t.Errorf("the other owner could not take the key: %v", aerr)
			}
			return middleware.FinalizeOutput{}, md, lostAnswer{}
		})
	client := db.Client(func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Insert(afterDelete, "Retry", middleware.After)
		})
	})
	declined := errors.New("declined")
	h := lambdakit.Idempotent(newStore(t, client, f.table), lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Logger = discardLogger()
	})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, declined
	}))
	msg := lambdakittest.Message(`{"id":"order-7"}`)
	_, err := h.Handle(t.Context(), &msg)
	var lost *lambdakit.LeaseLostError
	if errors.As(err, &lost) || errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("got %v; want the handler's error alone: this owner released in time", err)
	}
	if !errors.Is(err, declined) {
		t.Errorf("got %v; want the handler's error", err)
	}
}

// Many SQS batches at once in one process, as on Lambda Managed Instances:
// a bootstrap built with the race detector runs with
// AWS_LAMBDA_MAX_CONCURRENCY under the local Runtime API, through the real
// lambda.Start, on a table in moto. Every message is delivered twice, in
// two batches that may run at the same time; one batch also has a record
// whose handler panics.
func TestMiddlewareConcurrentInvocationsInOneProcess(t *testing.T) {
	const (
		perProcess = 8
		batches    = 16
		perBatch   = 5
		messages   = batches * perBatch / 2
	)
	table := local(t).NewTable(t)
	stdout, stderr := &logline.Buffer{}, &logline.Buffer{}
	r, err := runtimeapi.NewRunner(testenv.BuildRace(t, "./testdata/concurrentfn"), func(o *runtimeapi.RunnerOptions) {
		o.MaxConcurrency = perProcess
		o.Timeout = 30 * time.Second
		o.Env = append(motoserver.Env(local(t).URL), "TABLE="+table)
		o.LogFormat, o.LogLevel = "JSON", "DEBUG"
		o.Stdout, o.Stderr = stdout, stderr
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	msgs := make([]events.SQSMessage, messages)
	for k := range msgs {
		msgs[k] = lambdakittest.Message(fmt.Sprintf(`{"id":"m-%d"}`, k))
	}
	poison := lambdakittest.Message(`{"id":"panic"}`)
	// Batch i has messages 5i, 5i+8, 5i+16 ... (mod 40): each message is
	// in two batches, never twice in one.
	sent := make([][]events.SQSMessage, batches)
	for i := range sent {
		for j := range perBatch {
			sent[i] = append(sent[i], msgs[(i*perBatch+j*8)%messages])
		}
	}
	sent[0] = append(sent[0], poison)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := make([]runtimeapi.Result, batches)
	traces := make([]string, batches)
	var wg sync.WaitGroup
	for i, recs := range sent {
		traces[i] = fmt.Sprintf("Root=1-67890abc-%024d;Parent=53995c3f42cd8ad8;Sampled=0", i)
		payload, _ := json.Marshal(lambdakittest.Event(recs...))
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Invoke(ctx, payload, func(o *runtimeapi.InvokeOptions) { o.TraceID = traces[i] })
			if err != nil {
				t.Errorf("batch %d: %v", i, err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Fatalf("the race detector found a data race:\n%s", stderr)
	}

	batchOf := map[string]int{} // request ID → batch
	for i, res := range results {
		var resp events.SQSEventResponse
		if res.Outcome != runtimeapi.OutcomeSuccess || json.Unmarshal(res.Payload, &resp) != nil {
			t.Fatalf("batch %d: outcome %v, payload %s; want a partial batch response", i, res.Outcome, res.Payload)
		}
		var failed []string
		for _, f := range resp.BatchItemFailures {
			failed = append(failed, f.ItemIdentifier)
		}
		want := []string(nil)
		if i == 0 {
			want = []string{poison.MessageId} // the panic fails its record only
		}
		if !slices.Equal(failed, want) {
			t.Errorf("batch %d: failed %v; want %v", i, failed, want)
		}
		batchOf[res.RequestID] = i
	}

	// Each log line names its own invocation: a record's line names the
	// invocation whose batch has the record, with that invocation's trace.
	// The lines reach the buffer through a pipe, maybe after the answers:
	// wait for every record's line, for a while.
	doneLines := func() int {
		n := 0
		for _, l := range logline.Objects(stderr.String()) {
			if l["msg"] == "message done" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); doneLines() < batches*perBatch && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	handled := map[string]int{}
	done := map[string]map[string]bool{} // request ID → messages logged as done
	for _, l := range logline.Objects(stderr.String()) {
		id, _ := l["requestId"].(string)
		i, ok := batchOf[id]
		if !ok {
			continue // a line outside any invocation
		}
		msgID, _ := l["messageId"].(string)
		if !slices.ContainsFunc(sent[i], func(m events.SQSMessage) bool { return m.MessageId == msgID }) {
			t.Errorf("line %v names request %s, whose batch has no message %s", l, id, msgID)
		}
		if want := strings.TrimPrefix(strings.Split(traces[i], ";")[0], "Root="); l["xrayTraceId"] != want {
			t.Errorf("line %v: xrayTraceId %v; want its invocation's %s", l, l["xrayTraceId"], want)
		}
		switch l["msg"] {
		case "handled":
			handled[msgID]++
		case "message done":
			if done[id] == nil {
				done[id] = map[string]bool{}
			}
			done[id][msgID] = true
		}
	}
	for k, m := range msgs {
		if handled[m.MessageId] != 1 {
			t.Errorf("message m-%d handled %d times; want once", k, handled[m.MessageId])
		}
	}
	for id, i := range batchOf {
		if len(done[id]) != perBatch {
			t.Errorf("batch %d (request %s): %d records logged done; want %d", i, id, len(done[id]), perBatch)
		}
	}

	// One metrics line per invocation, counting that invocation's batch.
	// The process writes it before it answers, but its output reaches
	// the buffer through a pipe, after the answer may have: wait for it,
	// for a while.
	metricsLines := func() int {
		n := 0
		for _, m := range logline.Objects(stdout.String()) {
			if _, emf := m["_aws"]; emf {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); metricsLines() < batches && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	dups := 0
	lines := 0
	for _, m := range logline.Objects(stdout.String()) {
		i, ok := batchOf[fmt.Sprint(m["requestId"])]
		if _, emf := m["_aws"]; !emf || !ok {
			continue
		}
		lines++
		if want := float64(len(sent[i])); m["Records"] != want || m["Succeeded"] != float64(perBatch) {
			t.Errorf("batch %d: metrics count %v records, %v succeeded; want %v and %d", i, m["Records"], m["Succeeded"], want, perBatch)
		}
		dups += int(m["DuplicatesFromStore"].(float64) + m["DuplicatesFromCache"].(float64))
	}
	if lines != batches || dups != messages {
		t.Errorf("%d metrics lines counting %d duplicates; want %d lines and %d duplicates (each message's second delivery)", lines, dups, batches, messages)
	}
}
