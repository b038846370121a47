package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
)

func TestAcquire(t *testing.T) {
	t.Run("new key is acquired with one PutItem", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#new", t0)
		existing, acquired := f.acquire(t, rec, t0)
		if !acquired {
			t.Fatalf("acquired = false (held by %+v); want true", existing)
		}
		checkRecord(t, existing, lambdakit.IdempotencyRecord{})
		f.checkCalls(t, map[string]int{"PutItem": 1})

		item := f.record(t, rec.ID)
		if got, want := str(t, item, "status"), "INPROGRESS"; got != want {
			t.Errorf("status = %q; want %q", got, want)
		}
		if got, want := num(t, item, "expiration"), strconv.FormatInt(stored(rec).Expiration.Unix(), 10); got != want {
			t.Errorf("expiration = %s; want %s (epoch seconds)", got, want)
		}
		if got, want := num(t, item, "in_progress_expiration"), strconv.FormatInt(stored(rec).InProgressExpiration.UnixMilli(), 10); got != want {
			t.Errorf("in_progress_expiration = %s; want %s (epoch milliseconds)", got, want)
		}
		if got := str(t, item, "validation"); got != rec.Validation {
			t.Errorf("validation = %q; want %q", got, rec.Validation)
		}
		if got := str(t, item, "lease"); got != rec.Lease {
			t.Errorf("lease = %q; want %q", got, rec.Lease)
		}
		if _, ok := item["data"]; ok {
			t.Errorf("data = %v; want no data attribute", item["data"])
		}
	})

	t.Run("empty validation is not stored", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#novalidation", t0)
		rec.Validation = ""
		f.mustAcquire(t, rec, t0)
		if v, ok := f.record(t, rec.ID)["validation"]; ok {
			t.Errorf("validation = %v; want no validation attribute", v)
		}
	})

	t.Run("in-progress duplicate returns the holder with one PutItem", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		first := record("fn#dup", t0)
		f.mustAcquire(t, first, t0)
		f.calls.Reset()

		second := record(first.ID, t0.Add(time.Second))
		existing, acquired := f.acquire(t, second, t0.Add(time.Second))
		if acquired {
			t.Fatal("acquired = true; want false while the first lease holds")
		}
		checkRecord(t, existing, stored(first))
		f.checkCalls(t, map[string]int{"PutItem": 1})
		if got := str(t, f.record(t, first.ID), "lease"); got != first.Lease {
			t.Errorf("stored lease = %q; want the first owner's %q", got, first.Lease)
		}
	})

	t.Run("lease still held a millisecond before it ends", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		first := record("fn#edge", t0)
		f.mustAcquire(t, first, t0)
		at := stored(first).InProgressExpiration.Add(-time.Millisecond)
		if _, acquired := f.acquire(t, record(first.ID, at), at); acquired {
			t.Error("acquired = true; want false before in_progress_expiration")
		}
	})

	t.Run("lease that ended is taken over", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		first := record("fn#takeover", t0)
		f.mustAcquire(t, first, t0)
		// The lease ends at in_progress_expiration, as lambdakit.IdempotencyRecord.Live says.
		at := stored(first).InProgressExpiration
		if stored(first).Live(at) {
			t.Fatalf("Live(%v) = true; the test expects the lease to have ended", at)
		}
		second := record(first.ID, at)
		f.mustAcquire(t, second, at)
		if got := str(t, f.record(t, first.ID), "lease"); got != second.Lease {
			t.Errorf("stored lease = %q; want the new owner's %q", got, second.Lease)
		}
	})

	t.Run("completed duplicate returns the cached result", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#done", t0)
		f.mustAcquire(t, rec, t0)
		rec.Status = lambdakit.StatusCompleted
		rec.Data = []byte(`{"charged":42,"note":"héllo ✓"}`)
		f.mustComplete(t, rec)
		f.calls.Reset()

		// Past the old lease but before expiration: completed records
		// stay live until they expire.
		at := t0.Add(time.Minute)
		existing, acquired := f.acquire(t, record(rec.ID, at), at)
		if acquired {
			t.Fatal("acquired = true; want false for a completed record")
		}
		checkRecord(t, existing, stored(rec))
		f.checkCalls(t, map[string]int{"PutItem": 1})
	})

	t.Run("expired completed record is reused", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#expired", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte(`"old"`)
		f.mustComplete(t, rec)

		at := rec.Expiration.Add(time.Second)
		next := record(rec.ID, at)
		f.mustAcquire(t, next, at)
		item := f.record(t, rec.ID)
		if got := str(t, item, "status"); got != "INPROGRESS" {
			t.Errorf("status = %q; want INPROGRESS", got)
		}
		if v, ok := item["data"]; ok {
			t.Errorf("data = %v; want the old result gone", v)
		}
	})

	t.Run("other errors name the operation and key", func(t *testing.T) {
		f := setup(t)
		store := newStore(t, local(t).Client(), f.table+"-missing")
		t0 := now()
		_, _, err := store.Acquire(t.Context(), record("fn#nowhere", t0), t0)
		var notFound *types.ResourceNotFoundException
		if !errors.As(err, &notFound) {
			t.Fatalf("Acquire on a missing table: error %v; want a *types.ResourceNotFoundException", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "acquire fn#nowhere") {
			t.Errorf("error %q; want it to name the operation and key", msg)
		}
	})

	t.Run("malformed existing item is an error", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		putRaw(t, f, map[string]types.AttributeValue{
			"id":         &types.AttributeValueMemberS{Value: "fn#malformed"},
			"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
			"expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(t0.Add(time.Hour).Unix(), 10)},
			"data":       &types.AttributeValueMemberN{Value: "42"},
		})
		_, _, err := f.store.Acquire(t.Context(), record("fn#malformed", t0), t0)
		if err == nil || !strings.Contains(err.Error(), `"data"`) {
			t.Errorf("Acquire over a numeric data: error %v; want one naming the attribute", err)
		}
	})

	t.Run("powertools record without lease is read", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		exp := t0.Add(time.Hour).Unix()
		putRaw(t, f, map[string]types.AttributeValue{
			"id":         &types.AttributeValueMemberS{Value: "fn#python"},
			"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
			"expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(exp, 10)},
			"data":       &types.AttributeValueMemberS{Value: `{"ok":true}`},
		})
		existing, acquired := f.acquire(t, record("fn#python", t0), t0)
		if acquired {
			t.Fatal("acquired = true; want false for a live Powertools record")
		}
		checkRecord(t, existing, lambdakit.IdempotencyRecord{
			ID:         "fn#python",
			Status:     lambdakit.StatusCompleted,
			Expiration: time.Unix(exp, 0),
			Data:       []byte(`{"ok":true}`),
		})
	})
}

func TestAcquireConcurrentlyHasOneWinner(t *testing.T) {
	f := setup(t)
	t0 := now()
	const n = 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		holders = map[string]int{}
	)
	for range n {
		wg.Go(func() {
			rec := record("fn#race", t0)
			existing, acquired, err := f.store.Acquire(t.Context(), rec, t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Acquire: %v", err)
			case acquired:
				winners = append(winners, rec.Lease)
			default:
				holders[existing.Lease]++
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("acquired by %d goroutines; want exactly 1", len(winners))
	}
	if got := holders[winners[0]]; got != n-1 {
		t.Errorf("losers that saw the winner's lease = %d (saw %v); want %d", got, holders, n-1)
	}
	f.checkCalls(t, map[string]int{"PutItem": n})
}

func TestComplete(t *testing.T) {
	t.Run("stores the result with one UpdateItem", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#complete", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()

		rec.Status = lambdakit.StatusCompleted
		rec.Expiration = t0.Add(2 * time.Hour) // a completed record may be kept longer
		rec.Data = []byte(`{"id":"pay-1"}`)
		f.mustComplete(t, rec)
		f.checkCalls(t, map[string]int{"UpdateItem": 1})

		item := f.record(t, rec.ID)
		if got := str(t, item, "status"); got != "COMPLETED" {
			t.Errorf("status = %q; want COMPLETED", got)
		}
		if got, want := num(t, item, "expiration"), strconv.FormatInt(stored(rec).Expiration.Unix(), 10); got != want {
			t.Errorf("expiration = %s; want %s", got, want)
		}
		if got := str(t, item, "data"); got != string(rec.Data) {
			t.Errorf("data = %q; want %q", got, rec.Data)
		}
	})

	t.Run("without a result removes the old one", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#nodata", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte(`"first"`)
		f.mustComplete(t, rec)
		rec.Data = nil
		f.mustComplete(t, rec)
		if v, ok := f.record(t, rec.ID)["data"]; ok {
			t.Errorf("data = %v; want no data attribute", v)
		}
	})

	t.Run("empty result is no result", func(t *testing.T) {
		// As in the memory store and lambdakit.Store's contract: a
		// duplicate is then counted the same (skipped, not replayed)
		// whichever store a consumer was tested on.
		f := setup(t)
		t0 := now()
		rec := record("fn#empty", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte{}
		f.mustComplete(t, rec)
		if v, ok := f.record(t, rec.ID)["data"]; ok {
			t.Errorf("data = %v; want no data attribute", v)
		}
		existing, _ := f.acquire(t, record(rec.ID, t0), t0)
		if existing.Data != nil {
			t.Errorf("Data = %#v; want nil", existing.Data)
		}
	})

	t.Run("stale owner loses the lease after a takeover", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		stale := record("fn#stale", t0)
		f.mustAcquire(t, stale, t0)
		at := stale.InProgressExpiration.Add(time.Second)
		owner := record(stale.ID, at)
		f.mustAcquire(t, owner, at)

		stale.Data = []byte(`"late"`)
		if err := f.store.Complete(t.Context(), stale); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("stale Complete: error %v; want ErrLeaseLost", err)
		}
		item := f.record(t, stale.ID)
		if got := str(t, item, "status"); got != "INPROGRESS" {
			t.Errorf("status = %q; want the new owner's INPROGRESS", got)
		}
		if got := str(t, item, "lease"); got != owner.Lease {
			t.Errorf("lease = %q; want the new owner's %q", got, owner.Lease)
		}
	})

	t.Run("missing record loses the lease and is not created", func(t *testing.T) {
		f := setup(t)
		rec := record("fn#never", now())
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("Complete: error %v; want ErrLeaseLost", err)
		}
		if item := f.record(t, rec.ID); item != nil {
			t.Errorf("item = %v; want none", item)
		}
	})

	t.Run("result too large is refused without a request", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#large", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		rec.Data = []byte(`"` + strings.Repeat("x", 500<<10) + `"`)
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrResultNotStorable) {
			t.Errorf("Complete: error %v; want ErrResultNotStorable", err)
		}
		f.checkCalls(t, map[string]int{})
		if got := str(t, f.record(t, rec.ID), "status"); got != "INPROGRESS" {
			t.Errorf("status = %q; want INPROGRESS", got)
		}
		// What the middleware does next: complete without the result.
		rec.Data = nil
		f.mustComplete(t, rec)
	})

	t.Run("result that is not UTF-8 is refused without a request", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#binary", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		rec.Data = []byte{'"', 0xff, 0xfe, '"'}
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrResultNotStorable) {
			t.Errorf("Complete: error %v; want ErrResultNotStorable", err)
		}
		f.checkCalls(t, map[string]int{})
	})

	t.Run("large result that fits is stored", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#fits", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte(`"` + strings.Repeat("é", 195_000) + `"`) // 390,002 bytes
		f.mustComplete(t, rec)
		existing, _ := f.acquire(t, record(rec.ID, t0), t0)
		if len(existing.Data) != len(rec.Data) {
			t.Errorf("len(Data) = %d; want %d", len(existing.Data), len(rec.Data))
		}
	})
}

func TestRelease(t *testing.T) {
	t.Run("owner deletes its in-progress record with one DeleteItem", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#release", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		if err := f.store.Release(t.Context(), rec.ID, rec.Lease); err != nil {
			t.Fatalf("Release: %v", err)
		}
		f.checkCalls(t, map[string]int{"DeleteItem": 1})
		if item := f.record(t, rec.ID); item != nil {
			t.Errorf("item = %v; want it deleted", item)
		}
		f.mustAcquire(t, record(rec.ID, t0), t0)
	})

	t.Run("stale owner loses the lease and the record stays", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		stale := record("fn#stalerelease", t0)
		f.mustAcquire(t, stale, t0)
		at := stale.InProgressExpiration.Add(time.Second)
		owner := record(stale.ID, at)
		f.mustAcquire(t, owner, at)
		if err := f.store.Release(t.Context(), stale.ID, stale.Lease); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("stale Release: error %v; want ErrLeaseLost", err)
		}
		if got := str(t, f.record(t, stale.ID), "lease"); got != owner.Lease {
			t.Errorf("lease = %q; want the new owner's %q", got, owner.Lease)
		}
	})

	t.Run("completed record is not released", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#keep", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte(`"done"`)
		f.mustComplete(t, rec)
		if err := f.store.Release(t.Context(), rec.ID, rec.Lease); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("Release: error %v; want ErrLeaseLost", err)
		}
		item := f.record(t, rec.ID)
		if item == nil {
			t.Fatal("item deleted; want the completed record kept")
		}
		if got := str(t, item, "status"); got != "COMPLETED" {
			t.Errorf("status = %q; want COMPLETED", got)
		}
	})

	t.Run("missing record counts as released", func(t *testing.T) {
		f := setup(t)
		if err := f.store.Release(t.Context(), "fn#absent", "lease"); err != nil {
			t.Errorf("Release: error %v; want nil", err)
		}
		if n := f.count(t); n != 0 {
			t.Errorf("got %d items; want none created", n)
		}
	})
}

func TestCustomAttributeNames(t *testing.T) {
	names := func(o *dynamostore.Options) {
		o.KeyAttr = "pk"
		o.StatusAttr = "state"
		o.ExpirationAttr = "ttl"
		o.InProgressExpirationAttr = "lease_until_ms"
		o.ValidationAttr = "payload_hash"
		o.DataAttr = "result"
		o.LeaseAttr = "owner"
	}
	f := setup(t, names)
	t0 := now()
	rec := record("fn#custom", t0)
	f.mustAcquire(t, rec, t0)
	rec.Data = []byte(`{"ok":1}`)
	f.mustComplete(t, rec)

	item := f.item(t, f.table, "pk", rec.ID)
	for _, name := range []string{"state", "ttl", "lease_until_ms", "payload_hash", "result", "owner"} {
		if _, ok := item[name]; !ok {
			t.Errorf("attribute %q missing from %v", name, item)
		}
	}
	for _, name := range []string{"id", "status", "expiration", "in_progress_expiration", "validation", "data", "lease"} {
		if _, ok := item[name]; ok {
			t.Errorf("default attribute %q present in %v; want only the configured names", name, item)
		}
	}
	existing, acquired := f.acquire(t, record(rec.ID, t0), t0)
	if acquired {
		t.Fatal("acquired = true; want the completed record back")
	}
	rec.Status = lambdakit.StatusCompleted
	checkRecord(t, existing, stored(rec))

	released := record("fn#custom-release", t0)
	f.mustAcquire(t, released, t0)
	if err := f.store.Release(t.Context(), released.ID, released.Lease); err != nil {
		t.Errorf("Release: %v", err)
	}

	ttl, err := f.db.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(f.table)})
	if err != nil {
		t.Fatalf("DescribeTimeToLive: %v", err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != "ttl" {
		t.Errorf("TTL attribute = %q; want %q", got, "ttl")
	}
}

func TestNewRefusesAConfigurationThatCannotWork(t *testing.T) {
	// A real client on a port where nothing listens, counted: a refused
	// configuration must be refused before anything is sent.
	var calls testenv.Counter
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String("http://127.0.0.1:1"),
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, calls.APIOption)
		o.RetryMaxAttempts = 1
	})
	sameName := func(o *dynamostore.Options) { o.LeaseAttr = "id" }
	sortKeyNamedAlike := func(o *dynamostore.Options) { o.SortKeyAttr = "status" }
	staticWithoutSortKey := func(o *dynamostore.Options) { o.StaticPartitionKey = "idempotency#orders" }
	for _, c := range []struct {
		name   string
		client dynamostore.API
		table  string
		opts   []func(*dynamostore.Options)
		detail string // what the message must name
	}{
		{"two attributes named alike", db, "table", []func(*dynamostore.Options){sameName}, `"id"`},
		{"sort key named as another attribute", db, "table", []func(*dynamostore.Options){sortKeyNamedAlike}, `"status"`},
		{"static partition key without a sort key", db, "table", []func(*dynamostore.Options){staticWithoutSortKey}, "SortKeyAttr"},
		{"no client", nil, "table", nil, "no client"},
		{"no table", db, "", nil, "no table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := dynamostore.New(c.client, c.table, c.opts...)
			if !errors.Is(err, dynamostore.ErrInvalidConfig) {
				t.Fatalf("New: error %v; want one wrapping ErrInvalidConfig", err)
			}
			if store != nil {
				t.Errorf("New: store %v; want nil with the error", store)
			}
			if !strings.Contains(err.Error(), c.detail) {
				t.Errorf("New: error %q; want it to name %s", err, c.detail)
			}
		})
	}
	t.Run("CreateTable refuses the same options", func(t *testing.T) {
		err := dynamostore.CreateTable(t.Context(), db, "table", func(o *dynamostore.Options) { o.DataAttr = "status" })
		if !errors.Is(err, dynamostore.ErrInvalidConfig) {
			t.Errorf("CreateTable: error %v; want one wrapping ErrInvalidConfig", err)
		}
	})
	if got := calls.Total(); got != 0 {
		t.Errorf("requests sent = %v; want none", calls.Counts())
	}
}

// Powertools' composite-key layout (Options.SortKeyAttr): every record of
// the function under one partition key value, its ID in the sort key.
func TestCompositeKeyTable(t *testing.T) {
	f := setup(t, powertoolsLayout)
	key := func(pk, id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: id}}
	}
	getItem := func(t *testing.T, pk, id string) map[string]types.AttributeValue {
		t.Helper()
		out, err := f.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: key(pk, id), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("GetItem(%s, %s): %v", pk, id, err)
		}
		return out.Item
	}

	t.Run("a record is an item of the static partition key with its ID as sort key", func(t *testing.T) {
		t0 := now()
		rec := record("orders#layout", t0)
		f.mustAcquire(t, rec, t0)
		rec.Data = []byte(`{"ok":1}`)
		f.mustComplete(t, rec)
		item := getItem(t, "idempotency#orders", rec.ID)
		if got := str(t, item, "status"); got != "COMPLETED" {
			t.Errorf("status = %q; want COMPLETED", got)
		}
		if got := str(t, item, "data"); got != `{"ok":1}` {
			t.Errorf("data = %q; want the result", got)
		}
		released := record("orders#released", t0)
		f.mustAcquire(t, released, t0)
		if err := f.store.Release(t.Context(), released.ID, released.Lease); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if item := getItem(t, "idempotency#orders", released.ID); item != nil {
			t.Errorf("released record still there: %v", item)
		}
	})

	t.Run("a record Powertools wrote is read back", func(t *testing.T) {
		// The item Powertools' DynamoDBPersistenceLayer writes with
		// sort_key_attr="sk" and static_pk_value="idempotency#orders":
		// expiration in epoch seconds, the result a JSON string.
		t0 := now()
		exp := strconv.FormatInt(t0.Add(time.Hour).Unix(), 10)
		item := key("idempotency#orders", "orders#from-powertools")
		item["status"] = &types.AttributeValueMemberS{Value: "COMPLETED"}
		item["expiration"] = &types.AttributeValueMemberN{Value: exp}
		item["data"] = &types.AttributeValueMemberS{Value: `{"paid":true}`}
		putRaw(t, f, item)

		got, err := f.store.GetRecords(t.Context(), []string{"orders#from-powertools", "orders#none"})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		if rec, ok := got["orders#from-powertools"]; len(got) != 1 || !ok || rec.Status != lambdakit.StatusCompleted || string(rec.Data) != `{"paid":true}` {
			t.Errorf("GetRecords = %+v; want the completed record only", got)
		}
		existing, acquired := f.acquire(t, record("orders#from-powertools", t0), t0)
		if acquired || string(existing.Data) != `{"paid":true}` || existing.Expiration.Unix() != t0.Add(time.Hour).Unix() {
			t.Errorf("Acquire over it: acquired %t, holder %+v; want the completed record back", acquired, existing)
		}
	})

	t.Run("a record another runtime keeps for ever is read as live", func(t *testing.T) {
		// "Never" as another runtime may write it: Java's Long.MAX_VALUE
		// (time.Unix gives a time before now for it), or a number past
		// int64. DynamoDB's condition (#exp <= :now) keeps both live for
		// ever; read back, they must be live too, not long expired.
		t0 := now()
		for _, exp := range []string{"9223372036854775807", "1E+30"} {
			id := "orders#never-" + exp
			item := key("idempotency#orders", id)
			item["status"] = &types.AttributeValueMemberS{Value: "COMPLETED"}
			item["expiration"] = &types.AttributeValueMemberN{Value: exp}
			item["data"] = &types.AttributeValueMemberS{Value: `{"paid":true}`}
			putRaw(t, f, item)
			got, err := f.store.GetRecords(t.Context(), []string{id})
			if rec, ok := got[id]; err != nil || !ok || !rec.Live(t0) {
				t.Errorf("expiration %s: GetRecords = %+v, %v; want the record, live", exp, got, err)
			}
			if existing, acquired := f.acquire(t, record(id, t0), t0); acquired || !existing.Live(t0) {
				t.Errorf("expiration %s: Acquire over it: acquired %t, holder live %t; want the live record back", exp, acquired, existing.Live(t0))
			}
		}
	})

	t.Run("a stored expiration is read on the side of now DynamoDB's condition puts it", func(t *testing.T) {
		// DynamoDB compares numbers as decimals (#exp <= :now, :now in
		// whole seconds): a second and 1E-22 is after that second, where
		// float64 rounds it onto it; -1E+30 is before every now, not the
		// zero time, which reads as no expiration.
		t0 := now()
		for _, c := range []struct {
			exp  string
			live bool
		}{
			{strconv.FormatInt(t0.Unix(), 10) + ".0000000000000000000001", true},
			{"-1E+30", false},
			{"-9223372036854775808", false},
		} {
			id := "orders#edge" + c.exp
			item := key("idempotency#orders", id)
			item["status"] = &types.AttributeValueMemberS{Value: "COMPLETED"}
			item["expiration"] = &types.AttributeValueMemberN{Value: c.exp}
			putRaw(t, f, item)
			got, err := f.store.GetRecords(t.Context(), []string{id})
			if rec, ok := got[id]; err != nil || !ok || rec.Live(t0) != c.live {
				t.Errorf("expiration %s: GetRecords = %+v, %v; want the record, live %t", c.exp, got, err, c.live)
			}
		}
	})

	t.Run("another static partition key is another function's records", func(t *testing.T) {
		billing := newStore(t, f.db, f.table, func(o *dynamostore.Options) {
			o.SortKeyAttr, o.StaticPartitionKey = "sk", "idempotency#billing"
		})
		t0 := now()
		f.mustAcquire(t, record("shared#id", t0), t0)
		if existing, acquired, err := billing.Acquire(t.Context(), record("shared#id", t0), t0); err != nil || !acquired {
			t.Errorf("Acquire of the same ID under another partition key: acquired %t, holder %+v, error %v; want acquired", acquired, existing, err)
		}
	})

	t.Run("a ReadableIDs key too long for a sort key is refused before the work", func(t *testing.T) {
		key := strings.Repeat("k", 1100) // under a partition key's 2,048 bytes, over a sort key's 1,024
		for _, c := range []struct {
			name   string
			store  *dynamostore.Store
			refuse bool
		}{
			{"composite", f.store, true},
			{"partition key only", setup(t).store, false},
		} {
			f.calls.Reset()
			once := lambdakit.NewOnce(c.store, func(o *lambdakit.Options) {
				o.Prefix, o.ReadableIDs, o.Logger = "orders", true, discardLogger()
			})
			ran := false
			_, err := once.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
			if refused := errors.Is(err, lambdakit.ErrInvalidKey); refused != c.refuse || ran == c.refuse {
				t.Errorf("%s: Do with a key of %d bytes: error %v, handler ran %t; want refused with ErrInvalidKey %t", c.name, len(key), err, ran, c.refuse)
			}
			if c.refuse && f.calls.Total() != 0 {
				t.Errorf("%s: requests %v; want none", c.name, f.calls.Counts())
			}
		}
	})

	t.Run("the static partition key defaults to Powertools'", func(t *testing.T) {
		t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")
		o, err := dynamostore.ResolveOptions(func(o *dynamostore.Options) { o.SortKeyAttr = "sk" })
		if err != nil || o.StaticPartitionKey != "idempotency#orders-fn" {
			t.Errorf("ResolveOptions: StaticPartitionKey %q, error %v; want %q", o.StaticPartitionKey, err, "idempotency#orders-fn")
		}
	})
}
