package dynamostore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
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
