package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A re-driven batch of completed records on DynamoDB: one BatchGetItem
// answers all ten, instead of a failed conditional PutItem each.
func TestReadAheadOnDynamoDB(t *testing.T) {
	t.Run("partition key only", func(t *testing.T) { testReadAhead(t, setup(t)) })
	t.Run("composite key", func(t *testing.T) { testReadAhead(t, setup(t, powertoolsLayout)) })
}

func testReadAhead(t *testing.T, f *fixture) {
	key := lambdakit.KeyFromField("id")
	var runs atomic.Int32
	handler := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		runs.Add(1)
		return []byte(`{"ok":true}`), nil
	})
	msgs := make([]events.SQSMessage, 10)
	for i := range msgs {
		msgs[i] = lambdakittest.Message(fmt.Sprintf(`{"id":"cold-%d"}`, i))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first := lambdakit.Batch(lambdakit.Idempotent(f.store, key, func(o *lambdakit.Options) { o.Logger = discardLogger() })(handler),
		func(o *lambdakit.BatchOptions) { o.Logger = discardLogger() })
	if resp, err := first(ctx, lambdakittest.Event(msgs...)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("first delivery: %v, %v", resp, err)
	}
	f.calls.Reset()
	// A fresh container (empty cache) gets the whole batch again.
	again := make([]events.SQSMessage, len(msgs))
	for i, m := range msgs {
		again[i] = lambdakittest.Redelivery(m)
	}
	cold := lambdakit.Batch(lambdakit.Idempotent(f.store, key, func(o *lambdakit.Options) { o.Logger = discardLogger() })(handler),
		func(o *lambdakit.BatchOptions) { o.Logger = discardLogger() })
	if resp, err := cold(ctx, lambdakittest.Event(again...)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("cold redelivery: %v, %v", resp, err)
	}
	f.checkCalls(t, map[string]int{"BatchGetItem": 1})
	if n := runs.Load(); n != 10 {
		t.Errorf("handler ran %d times; want 10 (first delivery only)", n)
	}
}

// GetRecords asks for at most 100 keys a request.
func TestGetRecordsChunks(t *testing.T) {
	f := setup(t)
	t0 := now()
	ids := make([]string, 250)
	for i := range ids {
		ids[i] = fmt.Sprintf("fn#chunk-%d", i)
		if i%2 == 0 {
			f.mustAcquire(t, record(ids[i], t0), t0)
		}
	}
	f.calls.Reset()
	got, err := f.store.GetRecords(t.Context(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 125 {
		t.Errorf("got %d records; want 125", len(got))
	}
	f.checkCalls(t, map[string]int{"BatchGetItem": 3})
}

// DynamoDB refuses a BatchGetItem that names a key twice
// (ValidationException, which moto returns too); GetRecords asks for a
// repeated ID once.
func TestGetRecordsAsksForARepeatedIDOnce(t *testing.T) {
	f := setup(t)
	t0 := now()
	f.mustAcquire(t, record("fn#twice", t0), t0)
	f.calls.Reset()
	got, err := f.store.GetRecords(t.Context(), []string{"fn#twice", "fn#none", "fn#twice"})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if _, ok := got["fn#twice"]; !ok || len(got) != 1 {
		t.Errorf("got %v; want the record fn#twice only", got)
	}
	f.checkCalls(t, map[string]int{"BatchGetItem": 1})
}

// An item GetRecords cannot read as a record (here a business item under
// a readable ID whose "data" is a number) is left out, as if it had no
// record; the records beside it are still read, in the same request.
func TestGetRecordsLeavesOutAnItemItCannotRead(t *testing.T) {
	f := setup(t)
	t0 := now()
	for _, id := range []string{"orders#o-1", "orders#o-2"} {
		rec := record(id, t0)
		f.mustAcquire(t, rec, t0)
		rec.Status = lambdakit.StatusCompleted
		f.mustComplete(t, rec)
	}
	putRaw(t, f, map[string]types.AttributeValue{
		"id":     &types.AttributeValueMemberS{Value: "orders#o-3"},
		"status": &types.AttributeValueMemberS{Value: "COMPLETED"},
		"data":   &types.AttributeValueMemberN{Value: "3"},
	})
	f.calls.Reset()
	got, err := f.store.GetRecords(t.Context(), []string{"orders#o-1", "orders#o-2", "orders#o-3"})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if len(got) != 2 || got["orders#o-1"].Status != lambdakit.StatusCompleted || got["orders#o-2"].Status != lambdakit.StatusCompleted {
		t.Errorf("got %v; want the two completed records", got)
	}
	f.checkCalls(t, map[string]int{"BatchGetItem": 1})
}

// A read of more than 100 IDs sends its requests at once: one after the
// other, a batch of thousands of redelivered records would wait for tens of
// round trips before any record ran. moto answers on 127.0.0.1 in about a
// millisecond, so each BatchGetItem is held 30 ms, as a round trip to
// DynamoDB may take, for the requests to overlap if they are sent at once.
func TestGetRecordsSendsItsRequestsAtOnce(t *testing.T) {
	db := local(t)
	table := db.NewTable(t)
	var (
		mu             sync.Mutex
		inFlight, most int
	)
	slow := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("slowBatchGet",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
				time.Sleep(30 * time.Millisecond)
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
	store := newStore(t, db.Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, slow) }), table)
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("fn#at-once-%d", i)
	}
	began := time.Now()
	if _, err := store.GetRecords(t.Context(), ids); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 requests in %v", time.Since(began))
	if n := most; n != 3 {
		t.Errorf("at most %d BatchGetItem requests in flight; want 3, all at once", n)
	}
}
