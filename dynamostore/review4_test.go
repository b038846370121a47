package dynamostore_test

// A fourth adversarial review (2026-11-25): each test here failed on the code it was
// written against (615c2b3), and states the behaviour it expects and the
// promise it rests on.

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The two stores must agree (lambdakit.Store's contract, "Complete sets ...
// its result to rec.Data (none when nil)"; README: the memory store and
// DynamoDB both run RunStoreContract). A handler's empty, non-nil result
// ([]byte{}) is a result: dynamostore keeps it (data = "") and hands it back
// non-nil, while MemoryStore's Complete copies it with append([]byte(nil),
// ...), which is nil for an empty slice, so it keeps "no result". A
// duplicate then counts as "replayed" on DynamoDB and as "duplicate" (no
// result) on the memory store: its log line's outcome, and Replayed-style
// accounting, depend on the store.
func TestStoresAgreeOnAnEmptyResult(t *testing.T) {
	f := setup(t)
	stores := map[string]lambdakit.Store{"dynamostore": f.store, "MemoryStore": &lambdakittest.MemoryStore{}}
	got := map[string]bool{}
	for name, s := range stores {
		now := time.Now()
		rec := record("review4#empty-result#"+name, now)
		if _, ok, err := s.Acquire(context.Background(), rec, now); err != nil || !ok {
			t.Fatalf("%s: Acquire: %v, %v", name, ok, err)
		}
		rec.Status = lambdakit.StatusCompleted
		rec.Data = []byte{}
		if err := s.Complete(context.Background(), rec); err != nil {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		rec.Lease = "another"
		old, ok, err := s.Acquire(context.Background(), rec, now)
		if err != nil || ok {
			t.Fatalf("%s: second Acquire: %v, %v", name, ok, err)
		}
		got[name] = old.Data != nil
	}
	if got["dynamostore"] != got["MemoryStore"] {
		t.Errorf("a result of []byte{} comes back as a result (non-nil): dynamostore %v, MemoryStore %v; want the stores to agree",
			got["dynamostore"], got["MemoryStore"])
	}
}

// What the disagreement above changes for a user: the "record done" line of
// a duplicate of a record whose handler returned an empty result says
// outcome "replayed" on DynamoDB and "duplicate" on the memory store, so a
// test of a consumer on MemoryStore does not see what production logs.
func TestEmptyResultDuplicateLogsTheSameOutcomeOnBothStores(t *testing.T) {
	f := setup(t)
	outcome := map[string]string{}
	for name, s := range map[string]lambdakit.Store{"dynamostore": f.store, "MemoryStore": &lambdakittest.MemoryStore{}} {
		var logs lambdakittest.LogBuffer
		h := lambdakit.Idempotent(s, lambdakit.KeyFromField("id"), func(o *lambdakit.IdempotencyOptions) {
			o.Logger = logs.Logger()
			o.Prefix = "review4-" + name
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return []byte{}, nil }))
		batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger() })
		msg := lambdakittest.Message(`{"id":"review4-empty"}`)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, m := range []events.SQSMessage{msg, lambdakittest.Redelivery(msg)} {
			logs.Reset()
			if resp, err := batch(ctx, lambdakittest.Event(m)); err != nil || len(resp.BatchItemFailures) > 0 {
				t.Fatalf("%s: got %+v, %v", name, resp, err)
			}
		}
		cancel()
		for _, line := range logs.Lines(t) {
			if line["msg"] == "record done" {
				outcome[name], _ = line["outcome"].(string)
			}
		}
	}
	if outcome["dynamostore"] != outcome["MemoryStore"] {
		t.Errorf("duplicate's outcome: dynamostore %q, MemoryStore %q; want the same", outcome["dynamostore"], outcome["MemoryStore"])
	}
}
