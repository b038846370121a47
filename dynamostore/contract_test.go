package dynamostore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// The same contract the in-memory store meets, on DynamoDB (moto).
func TestStoreContract(t *testing.T) {
	f := setup(t)
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store { return f.store })
}

// The idempotency engine (Once.Do) on DynamoDB, held to the same
// checks as on the memory store.
func TestIdempotencyChecks(t *testing.T) {
	storetest.RunIdempotencyChecks(t, func(t *testing.T) lambdakit.Store { return setup(t).store })
}

// A crashed process's record on DynamoDB (moto): locked until its lease
// ends, then taken over; with StoreEffect, not run again.
func TestCrashChecks(t *testing.T) {
	f := setup(t)
	storetest.RunCrashChecks(t, func(*testing.T) lambdakit.Store { return f.store })
}

// A handler's empty result ([]byte{}) is no result on both stores (the
// store contract checks the stores themselves): the "message done" line of
// its duplicate says the same outcome on DynamoDB and on the memory store
// (not "replayed" on one and "duplicate" on the other), so a test of a
// consumer on MemoryStore sees what production logs.
func TestEmptyResultDuplicateLogsTheSameOutcomeOnBothStores(t *testing.T) {
	f := setup(t)
	outcome := map[string]string{}
	for name, s := range map[string]lambdakit.Store{"dynamostore": f.store, "MemoryStore": &lambdakittest.MemoryStore{}} {
		var logs lambdakittest.LogBuffer
		h := lambdakit.Idempotent(s, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
			o.Logger = logs.Logger()
			o.Prefix = "contract-" + name
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return []byte{}, nil }))
		batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger() })
		msg := lambdakittest.Message(`{"id":"contract-empty"}`)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, m := range []events.SQSMessage{msg, lambdakittest.Redelivery(msg)} {
			logs.Reset()
			if resp, err := batch(ctx, lambdakittest.Event(m)); err != nil || len(resp.BatchItemFailures) > 0 {
				t.Fatalf("%s: got %+v, %v", name, resp, err)
			}
		}
		cancel()
		for _, line := range logs.Lines(t) {
			if line["msg"] == "message done" {
				outcome[name], _ = line["outcome"].(string)
			}
		}
	}
	if outcome["dynamostore"] != outcome["MemoryStore"] {
		t.Errorf("duplicate's outcome: dynamostore %q, MemoryStore %q; want the same", outcome["dynamostore"], outcome["MemoryStore"])
	}
}

// The Committer contract and the engine's cheaper modes, on DynamoDB as on
// the memory store.
func TestCommitContract(t *testing.T) {
	f := setup(t)
	storetest.RunCommitContract(t, func(*testing.T) lambdakit.Store { return f.store })
}

func TestModeChecks(t *testing.T) {
	f := setup(t)
	storetest.RunModeChecks(t, func(*testing.T) lambdakit.Store { return f.store },
		func(attrs map[string]string) any {
			m := make(map[string]types.AttributeValue, len(attrs))
			for k, v := range attrs {
				m[k] = &types.AttributeValueMemberS{Value: v}
			}
			return m
		})
}

// Items other code wrote under a record's ID with a status that is no
// record status, on DynamoDB (moto), written in the table's default
// attribute names.
func TestUnknownStatusContract(t *testing.T) {
	f := setup(t)
	storetest.RunUnknownStatusContract(t, func(*testing.T) lambdakit.Store { return f.store },
		func(t *testing.T, _ lambdakit.Store, rec lambdakit.IdempotencyRecord) {
			item := map[string]types.AttributeValue{
				"id":    &types.AttributeValueMemberS{Value: rec.ID},
				"lease": &types.AttributeValueMemberS{Value: rec.Lease},
			}
			if rec.Status != "" {
				item["status"] = &types.AttributeValueMemberS{Value: string(rec.Status)}
			}
			if !rec.Expiration.IsZero() {
				item["expiration"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(rec.Expiration.Unix(), 10)}
			}
			if !rec.InProgressExpiration.IsZero() {
				item["in_progress_expiration"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(rec.InProgressExpiration.UnixMilli(), 10)}
			}
			if len(rec.Data) > 0 {
				item["data"] = &types.AttributeValueMemberS{Value: string(rec.Data)}
			}
			putRaw(t, f, item)
		})
}

// powertoolsLayout is Powertools' composite-key layout: every record of
// the function under one partition key value, its ID in the sort key.
func powertoolsLayout(o *dynamostore.Options) {
	o.SortKeyAttr, o.StaticPartitionKey = "sk", "idempotency#orders"
}

// The store contract, the engine's checks and the Committer contract hold
// on a composite-key table as on a table keyed by the record ID alone.
func TestContractsOnCompositeKeyTable(t *testing.T) {
	f := setup(t, powertoolsLayout)
	store := func(*testing.T) lambdakit.Store { return f.store }
	t.Run("store", func(t *testing.T) { storetest.RunStoreContract(t, store) })
	t.Run("commit", func(t *testing.T) { storetest.RunCommitContract(t, store) })
	t.Run("idempotency", func(t *testing.T) {
		storetest.RunIdempotencyChecks(t, func(t *testing.T) lambdakit.Store { return setup(t, powertoolsLayout).store })
	})
}
