package dynamostore_test

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
)

func TestRecordsGet(t *testing.T) {
	f := setup(t)
	records := dynamostore.NewRecords(f.db, f.table)
	at := now()
	rec := record("payment#abc", at)
	f.acquire(t, rec, at)

	t.Run("in progress: as stored", func(t *testing.T) {
		got, err := records.Get(t.Context(), rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := stored(rec); !sameRecord(got, want) {
			t.Errorf("Get = %+v; want %+v", got, want)
		}
	})

	t.Run("completed: status, expiration and result", func(t *testing.T) {
		done := rec
		done.Status, done.Data, done.Expiration = lambdakit.StatusCompleted, []byte(`{"status":"CHARGED"}`), at.Add(2*time.Hour)
		if err := f.store.Complete(t.Context(), done); err != nil {
			t.Fatal(err)
		}
		got, err := records.Get(t.Context(), rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := stored(done); !sameRecord(got, want) {
			t.Errorf("Get = %+v; want %+v", got, want)
		}
	})

	t.Run("absent: ErrNotFound", func(t *testing.T) {
		if _, err := records.Get(t.Context(), "payment#nothing"); !errors.Is(err, dynamostore.ErrNotFound) {
			t.Errorf("Get of an absent ID: %v; want ErrNotFound", err)
		}
	})

	t.Run("no table: ErrNoTable", func(t *testing.T) {
		missing := dynamostore.NewRecords(f.db, testenv.Name(t))
		if _, err := missing.Get(t.Context(), rec.ID); !errors.Is(err, dynamostore.ErrNoTable) {
			t.Errorf("Get on a missing table: %v; want ErrNoTable", err)
		}
		for _, err := range missing.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "payment"}) {
			if !errors.Is(err, dynamostore.ErrNoTable) {
				t.Errorf("Scan on a missing table: %v; want ErrNoTable", err)
			}
		}
	})
}

func sameRecord(a, b lambdakit.IdempotencyRecord) bool {
	return a.ID == b.ID && a.Status == b.Status && a.Expiration.Equal(b.Expiration) &&
		a.InProgressExpiration.Equal(b.InProgressExpiration) && a.Validation == b.Validation &&
		a.Lease == b.Lease && string(a.Data) == string(b.Data)
}

func TestRecordsDelete(t *testing.T) {
	f := setup(t)
	records := dynamostore.NewRecords(f.db, f.table)
	at := now()

	t.Run("as read: deleted, and the key can be taken again", func(t *testing.T) {
		rec := record("payment#del1", at)
		f.acquire(t, rec, at)
		got, err := records.Get(t.Context(), rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := records.Delete(t.Context(), got); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := records.Get(t.Context(), rec.ID); !errors.Is(err, dynamostore.ErrNotFound) {
			t.Errorf("Get after Delete: %v; want ErrNotFound", err)
		}
		if _, acquired := f.acquire(t, record(rec.ID, at), at); !acquired {
			t.Errorf("Acquire after Delete: not acquired; want the key free")
		}
	})

	t.Run("changed since it was read: ErrRecordChanged, kept", func(t *testing.T) {
		rec := record("payment#del2", at)
		f.acquire(t, rec, at)
		read, err := records.Get(t.Context(), rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		done := rec
		done.Status = lambdakit.StatusCompleted
		if err := f.store.Complete(t.Context(), done); err != nil {
			t.Fatal(err)
		}
		if err := records.Delete(t.Context(), read); !errors.Is(err, dynamostore.ErrRecordChanged) {
			t.Errorf("Delete of a record completed since: %v; want ErrRecordChanged", err)
		}
		if got, err := records.Get(t.Context(), rec.ID); err != nil || got.Status != lambdakit.StatusCompleted {
			t.Errorf("record after a refused Delete: %+v, %v; want it completed, still there", got, err)
		}
	})

	t.Run("gone: ErrNotFound", func(t *testing.T) {
		rec := stored(record("payment#del3", at))
		if err := records.Delete(t.Context(), rec); !errors.Is(err, dynamostore.ErrNotFound) {
			t.Errorf("Delete of an absent record: %v; want ErrNotFound", err)
		}
	})
}

func TestRecordsScan(t *testing.T) {
	f := setup(t)
	records := dynamostore.NewRecords(f.db, f.table)
	at := now()
	// In progress, lease ended 10 minutes ago, 1 minute ago, or still on;
	// completed; and another prefix.
	ended10 := record("payment#ended10", at.Add(-40*time.Minute))
	ended10.InProgressExpiration = at.Add(-10 * time.Minute)
	ended1 := record("payment#ended1", at.Add(-40*time.Minute))
	ended1.InProgressExpiration = at.Add(-time.Minute)
	running := record("payment#running", at)
	completed := record("payment#completed", at.Add(-40*time.Minute))
	completed.InProgressExpiration = at.Add(-20 * time.Minute)
	other := record("refund#ended", at.Add(-40*time.Minute))
	other.InProgressExpiration = at.Add(-10 * time.Minute)
	for _, r := range []lambdakit.IdempotencyRecord{ended10, ended1, running, completed, other} {
		f.acquire(t, r, at.Add(-40*time.Minute))
	}
	failed := record("payment#failed", at.Add(-40*time.Minute))
	f.acquire(t, failed, at.Add(-40*time.Minute))
	done := completed
	done.Status = lambdakit.StatusCompleted
	failed.Status, failed.Failure = lambdakit.StatusCompleted, "completion rejected"
	for _, r := range []lambdakit.IdempotencyRecord{done, failed} {
		if err := f.store.Complete(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}

	scan := func(filter dynamostore.ScanFilter) []string {
		t.Helper()
		var ids []string
		for rec, err := range records.Scan(t.Context(), filter) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, tc := range []struct {
		name   string
		filter dynamostore.ScanFilter
		want   []string
	}{
		{"a prefix: its records only", dynamostore.ScanFilter{Prefix: "payment"}, []string{completed.ID, ended1.ID, ended10.ID, failed.ID, running.ID}},
		{"completed with a failure", dynamostore.ScanFilter{Prefix: "payment", Failed: true}, []string{failed.ID}},
		{"in progress", dynamostore.ScanFilter{Prefix: "payment", InProgress: true}, []string{ended1.ID, ended10.ID, running.ID}},
		{"lease ended before now", dynamostore.ScanFilter{Prefix: "payment", InProgress: true, LeaseEndedBefore: at}, []string{ended1.ID, ended10.ID}},
		{"lease ended more than 5 minutes ago", dynamostore.ScanFilter{Prefix: "payment", InProgress: true, LeaseEndedBefore: at.Add(-5 * time.Minute)}, []string{ended10.ID}},
		{"a prefix that is the start of another's is not it", dynamostore.ScanFilter{Prefix: "pay"}, nil},
		{"no such prefix", dynamostore.ScanFilter{Prefix: "nothing"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scan(tc.filter); !slices.Equal(got, tc.want) {
				t.Errorf("Scan(%+v) = %q; want %q", tc.filter, got, tc.want)
			}
		})
	}

	t.Run("HasPrefix", func(t *testing.T) {
		for prefix, want := range map[string]bool{"payment": true, "refund": true, "pay": false, "nothing": false} {
			if got, err := records.HasPrefix(t.Context(), prefix); err != nil || got != want {
				t.Errorf("HasPrefix(%q) = %v, %v; want %v", prefix, got, err, want)
			}
		}
	})

	t.Run("an empty prefix is an error", func(t *testing.T) {
		for _, err := range records.Scan(t.Context(), dynamostore.ScanFilter{}) {
			if err == nil {
				t.Error("Scan with no prefix: no error; want one")
			}
		}
	})
}

// Scan follows LastEvaluatedKey: with pages of a few items, it still finds
// every record, and stops when the caller stops.
func TestRecordsScanPages(t *testing.T) {
	f := setup(t)
	var pages testenv.Counter
	paged := local(t).Client(func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, pages.APIOption, limitScan(3))
	})
	records := dynamostore.NewRecords(paged, f.table)
	at := now()
	for i := range 10 {
		f.acquire(t, record(fmt.Sprintf("payment#%02d", i), at), at)
	}
	n := 0
	for _, err := range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "payment"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 10 || pages.Count("Scan") < 4 {
		t.Errorf("Scan found %d records in %d pages; want 10 in at least 4", n, pages.Count("Scan"))
	}
	pages.Reset()
	for range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "payment"}) {
		break
	}
	if got := pages.Count("Scan"); got != 1 {
		t.Errorf("Scan stopped after the first record made %d calls; want 1", got)
	}
}

// limitScan makes every Scan of a client return at most n items a page.
func limitScan(n int32) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("limitScan",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if s, ok := in.Parameters.(*dynamodb.ScanInput); ok {
					s.Limit = aws.Int32(n)
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// An item whose status is no record status (a ledger row's own CHARGED,
// read with the default StatusAttr) is not a record: Get returns a
// *StatusError naming the attribute and what it holds, and Delete refuses
// it, so the item stays.
func TestRecordsRefuseAnItemWhoseStatusIsNoRecordStatus(t *testing.T) {
	f := setup(t)
	records := dynamostore.NewRecords(f.db, f.table)
	id := "payment#pay_1"
	if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: id}, "status": &types.AttributeValueMemberS{Value: "CHARGED"},
	}}); err != nil {
		t.Fatal(err)
	}
	var se *dynamostore.StatusError
	if _, err := records.Get(t.Context(), id); !errors.As(err, &se) || se.ID != id || se.Attr != "status" || se.Status != "CHARGED" {
		t.Errorf("Get = %v; want a *StatusError naming the attribute status and CHARGED", err)
	}
	if err := records.Delete(t.Context(), lambdakit.IdempotencyRecord{ID: id, Status: "CHARGED"}); !errors.As(err, &se) {
		t.Errorf("Delete = %v; want a *StatusError", err)
	}
	out, err := f.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	if err != nil || len(out.Item) == 0 {
		t.Errorf("after the refused Delete: item %v, %v; want it kept", out.Item, err)
	}
}

// On a composite-key table Records reads, lists and deletes the
// function's records only: those under its static partition key.
func TestRecordsOnCompositeKeyTable(t *testing.T) {
	f := setup(t, powertoolsLayout)
	records := dynamostore.NewRecords(f.db, f.table, powertoolsLayout)
	billing := newStore(t, f.db, f.table, func(o *dynamostore.Options) {
		o.SortKeyAttr, o.StaticPartitionKey = "sk", "idempotency#billing"
	})
	at := now()
	mine, theirs := record("payment#stuck", at.Add(-time.Hour)), record("payment#stuck", at.Add(-time.Hour))
	f.mustAcquire(t, mine, at.Add(-time.Hour))
	if _, acquired, err := billing.Acquire(t.Context(), theirs, at.Add(-time.Hour)); err != nil || !acquired {
		t.Fatalf("billing's Acquire: acquired %t, error %v", acquired, err)
	}

	got, err := records.Get(t.Context(), mine.ID)
	if err != nil || got.Lease != mine.Lease {
		t.Fatalf("Get = %+v, %v; want the orders function's record (lease %s)", got, err, mine.Lease)
	}
	var listed []string
	for rec, err := range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "payment", LeaseEndedBefore: at}) {
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		listed = append(listed, rec.Lease)
	}
	if !slices.Equal(listed, []string{mine.Lease}) {
		t.Errorf("Scan listed leases %q; want only the orders function's %q", listed, mine.Lease)
	}
	if err := records.Delete(t.Context(), got); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := records.Get(t.Context(), mine.ID); !errors.Is(err, dynamostore.ErrNotFound) {
		t.Errorf("Get after Delete: %v; want ErrNotFound", err)
	}
	// Asked when its lease still ran: held, so not deleted.
	then := at.Add(-time.Hour)
	if _, acquired, err := billing.Acquire(t.Context(), record(theirs.ID, then), then); err != nil || acquired {
		t.Errorf("billing's record after the orders function's was deleted: acquired %t, error %v; want it still held", acquired, err)
	}
}

// Items that Powertools functions write in the composite-key layout its
// docs give (the partition key id holding idempotency#<function name>,
// "<function name>#<md5 of the payload>" in the sort key sort_key; status,
// expiration in epoch seconds, in_progress_expiration in epoch
// milliseconds, the result as JSON text in data; no lease) are read back,
// and listing the function's records queries its partition: the table,
// shared with other functions, is never scanned.
func TestRecordsListPowertoolsItemsByQuery(t *testing.T) {
	layout := func(o *dynamostore.Options) { o.SortKeyAttr, o.StaticPartitionKey = "sort_key", "idempotency#orders" }
	f := setup(t, layout)
	var calls testenv.Counter
	counted := local(t).Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	records := dynamostore.NewRecords(counted, f.table, layout)
	at := time.Now().Truncate(time.Second)
	put := func(pk, payload, status string, data string) string {
		t.Helper()
		sk := fmt.Sprintf("orders#%x", md5.Sum([]byte(payload)))
		f.putSortKeyRecord(t, pk, sk, status, data, at)
		return sk
	}
	done := put("idempotency#orders", `{"order_id":"o-1"}`, "COMPLETED", `{"receipt":1}`)
	stuck := put("idempotency#orders", `{"order_id":"o-2"}`, "INPROGRESS", "")
	put("idempotency#billing", `{"order_id":"o-3"}`, "INPROGRESS", "") // another function's, under the same prefix

	got := map[string]lambdakit.IdempotencyRecord{}
	for rec, err := range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "orders"}) {
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		got[rec.ID] = rec
	}
	want := lambdakit.IdempotencyRecord{ID: done, Status: lambdakit.StatusCompleted, Expiration: at.Add(time.Hour),
		InProgressExpiration: at.Add(-time.Minute), Data: []byte(`{"receipt":1}`)}
	if len(got) != 2 || !reflect.DeepEqual(got[done], want) || got[stuck].Status != lambdakit.StatusInProgress {
		t.Errorf("listed %+v; want the orders function's two records, the completed one as %+v", got, want)
	}
	var listed []string
	for rec, err := range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "orders", InProgress: true, LeaseEndedBefore: at}) {
		if err != nil {
			t.Fatalf("Scan of the stuck: %v", err)
		}
		listed = append(listed, rec.ID)
	}
	if !slices.Equal(listed, []string{stuck}) {
		t.Errorf("stuck: listed %q; want %q alone", listed, stuck)
	}
	if found, err := records.HasPrefix(t.Context(), "payments"); found || err != nil {
		t.Errorf("HasPrefix of a prefix without records: %t, %v; want false", found, err)
	}
	if calls.Count("Scan") != 0 || calls.Count("Query") != 3 {
		t.Errorf("made %d Scan and %d Query requests; want no Scan, a Query per listing", calls.Count("Scan"), calls.Count("Query"))
	}
}

// pagedRecords is the real client with a Limit on every Query: DynamoDB
// ends a page at 1 MB of items read, before the filter, and moto pages by
// Limit only, so a small Limit stands in for a table too large for one
// page.
type pagedRecords struct {
	dynamostore.RecordsAPI
	limit int32
}

func (p pagedRecords) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	in.Limit = aws.Int32(p.limit)
	return p.RecordsAPI.Query(ctx, in, optFns...)
}

// Listing a composite-key table's records goes on page after page,
// through pages whose items all fail the filter (they still name a
// LastEvaluatedKey), and lists only the function's records: neither
// another partition's items nor the items of its partition whose sort
// key does not begin with "<prefix>#".
func TestRecordsQueryPagesThroughFilteredPages(t *testing.T) {
	layout := func(o *dynamostore.Options) { o.SortKeyAttr, o.StaticPartitionKey = "sort_key", "idempotency#orders" }
	f := setup(t, layout)
	var calls testenv.Counter
	counted := local(t).Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	records := dynamostore.NewRecords(pagedRecords{counted, 1}, f.table, layout)
	at := time.Now().Truncate(time.Second)
	put := func(pk, sk, status string) {
		t.Helper()
		f.putSortKeyRecord(t, pk, sk, status, "", at)
	}
	put("idempotency#orders", "order#0", "INPROGRESS") // another prefix, sorted before
	for _, sk := range []string{"orders#1", "orders#2", "orders#3", "orders#4", "orders#5"} {
		put("idempotency#orders", sk, "COMPLETED")
	}
	put("idempotency#orders", "orders#6", "INPROGRESS")
	put("idempotency#orders", "orders.app.handler#7", "INPROGRESS") // Powertools Python's, under the function's name
	put("idempotency#orders", "ordersX#8", "INPROGRESS")            // another prefix, sorted after
	put("idempotency#billing", "orders#9", "INPROGRESS")            // another function's partition
	var listed []string
	for rec, err := range records.Scan(t.Context(), dynamostore.ScanFilter{Prefix: "orders", InProgress: true}) {
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		listed = append(listed, rec.ID)
	}
	if !slices.Equal(listed, []string{"orders#6"}) {
		t.Errorf("listed %q; want orders#6 alone", listed)
	}
	if n := calls.Count("Query"); n < 6 {
		t.Errorf("made %d Query requests; want one a page, at least 6", n)
	}
	if found, err := records.HasPrefix(t.Context(), "orders"); !found || err != nil {
		t.Errorf("HasPrefix: %t, %v; want true", found, err)
	}
}

// putSortKeyRecord writes a record item as Powertools keeps it in a table
// with a sort key (SortKeyAttr "sort_key"): partition pk, record ID sk,
// status, a result data ("" for none), expiring an hour after at, its
// lease ended a minute before at.
func (f *fixture) putSortKeyRecord(t *testing.T, pk, sk, status, data string, at time.Time) {
	t.Helper()
	item := map[string]types.AttributeValue{
		"id":                     &types.AttributeValueMemberS{Value: pk},
		"sort_key":               &types.AttributeValueMemberS{Value: sk},
		"status":                 &types.AttributeValueMemberS{Value: status},
		"expiration":             &types.AttributeValueMemberN{Value: fmt.Sprint(at.Add(time.Hour).Unix())},
		"in_progress_expiration": &types.AttributeValueMemberN{Value: fmt.Sprint(at.Add(-time.Minute).UnixMilli())},
	}
	if data != "" {
		item["data"] = &types.AttributeValueMemberS{Value: data}
	}
	if _, err := f.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		t.Fatal(err)
	}
}
