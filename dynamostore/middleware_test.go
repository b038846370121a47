package dynamostore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The idempotency middleware on DynamoDB: how many requests each kind of
// record costs.
func TestIdempotentRequestCounts(t *testing.T) {
	f := setup(t)
	runs := 0
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.IdempotencyOptions) {
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
		{"duplicate", lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.IdempotencyOptions) {
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
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.IdempotencyOptions) {
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

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
