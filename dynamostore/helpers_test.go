package dynamostore_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// One moto_server for the package's tests, through the package users get
// for their own tests: every dynamostoretest.Start reuses it.
func TestMain(m *testing.M) { dynamostoretest.Run(m) }

// local returns the package's local DynamoDB; see TestMain.
func local(tb testing.TB) *dynamostoretest.Endpoint {
	tb.Helper()
	return dynamostoretest.Start(tb)
}

// fixture is a Store on a fresh table of its own.
type fixture struct {
	store *dynamostore.Store
	table string
	// calls counts the requests the store sends.
	calls *testenv.Counter
	// db is a second client, not counted, to look at the table directly.
	db *dynamodb.Client
}

func setup(tb testing.TB, optFns ...func(*dynamostore.Options)) *fixture {
	tb.Helper()
	db := local(tb)
	f := &fixture{
		table: db.NewTable(tb, optFns...),
		calls: new(testenv.Counter),
		db:    db.Client(),
	}
	counted := db.Client(func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, f.calls.APIOption)
	})
	f.store = newStore(tb, counted, f.table, optFns...)
	return f
}

// newStore is dynamostore.New for a configuration that must be valid.
func newStore(tb testing.TB, client dynamostore.API, table string, optFns ...func(*dynamostore.Options)) *dynamostore.Store {
	tb.Helper()
	store, err := dynamostore.New(client, table, optFns...)
	if err != nil {
		tb.Fatalf("dynamostore.New: %v", err)
	}
	return store
}

// record returns a fresh record for id, as the middleware would build it
// at now: a lease for 30 s, kept for an hour.
func record(id string, now time.Time) lambdakit.IdempotencyRecord {
	return lambdakit.IdempotencyRecord{
		ID:                   id,
		Status:               lambdakit.StatusInProgress,
		Expiration:           now.Add(time.Hour),
		InProgressExpiration: now.Add(30 * time.Second),
		Validation:           "payload-hash",
		Lease:                rand.Text(),
	}
}

// stored is rec as the store keeps it: times rounded up to seconds and
// milliseconds.
func stored(rec lambdakit.IdempotencyRecord) lambdakit.IdempotencyRecord {
	rec = rec.Rounded()
	rec.Staged = nil
	return rec
}

// now returns the current time with a sub-millisecond part, so that the
// rounding of stored times shows.
func now() time.Time {
	return time.Now().Truncate(time.Second).Add(1234567 * time.Nanosecond)
}

func (f *fixture) acquire(tb testing.TB, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool) {
	tb.Helper()
	existing, acquired, err := f.store.Acquire(tb.Context(), rec, now)
	if err != nil {
		tb.Fatalf("Acquire(%s): %v", rec.ID, err)
	}
	return existing, acquired
}

func (f *fixture) mustAcquire(tb testing.TB, rec lambdakit.IdempotencyRecord, now time.Time) {
	tb.Helper()
	if existing, acquired := f.acquire(tb, rec, now); !acquired {
		tb.Fatalf("Acquire(%s): not acquired, held by %+v; want acquired", rec.ID, existing)
	}
}

func (f *fixture) mustComplete(tb testing.TB, rec lambdakit.IdempotencyRecord) {
	tb.Helper()
	if err := f.store.Complete(tb.Context(), rec); err != nil {
		tb.Fatalf("Complete(%s): %v", rec.ID, err)
	}
}

// item reads id's item straight from the table; nil when there is none.
func (f *fixture) item(tb testing.TB, table, keyAttr, id string) map[string]types.AttributeValue {
	tb.Helper()
	out, err := f.db.GetItem(tb.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{keyAttr: &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		tb.Fatalf("GetItem(%s): %v", id, err)
	}
	return out.Item
}

func (f *fixture) record(tb testing.TB, id string) map[string]types.AttributeValue {
	tb.Helper()
	return f.item(tb, f.table, "id", id)
}

func str(tb testing.TB, item map[string]types.AttributeValue, name string) string {
	tb.Helper()
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		tb.Fatalf("attribute %q = %#v; want a string", name, item[name])
	}
	return v.Value
}

func num(tb testing.TB, item map[string]types.AttributeValue, name string) string {
	tb.Helper()
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		tb.Fatalf("attribute %q = %#v; want a number", name, item[name])
	}
	return v.Value
}

func checkRecord(tb testing.TB, got, want lambdakit.IdempotencyRecord) {
	tb.Helper()
	if got.ID != want.ID || got.Status != want.Status || got.Validation != want.Validation || got.Lease != want.Lease {
		tb.Errorf("record = {ID:%q Status:%q Validation:%q Lease:%q}; want {ID:%q Status:%q Validation:%q Lease:%q}",
			got.ID, got.Status, got.Validation, got.Lease, want.ID, want.Status, want.Validation, want.Lease)
	}
	if !got.Expiration.Equal(want.Expiration) {
		tb.Errorf("Expiration = %v; want %v", got.Expiration, want.Expiration)
	}
	if !got.InProgressExpiration.Equal(want.InProgressExpiration) {
		tb.Errorf("InProgressExpiration = %v; want %v", got.InProgressExpiration, want.InProgressExpiration)
	}
	if !bytes.Equal(got.Data, want.Data) || (got.Data == nil) != (want.Data == nil) {
		tb.Errorf("Data = %q (nil: %t); want %q (nil: %t)", got.Data, got.Data == nil, want.Data, want.Data == nil)
	}
}

// checkCalls compares the requests the store sent since the last Reset
// with want, operation by operation.
func (f *fixture) checkCalls(tb testing.TB, want map[string]int) {
	tb.Helper()
	total := 0
	for op, n := range want {
		total += n
		if got := f.calls.Count(op); got != n {
			tb.Errorf("%s requests = %d; want %d", op, got, n)
		}
	}
	if got := f.calls.Total(); got != total {
		tb.Errorf("requests = %v; want %v", f.calls.Counts(), want)
	}
}

// sha256Hex is the hex SHA-256 of key, as record IDs carry it.
func sha256Hex(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func putRaw(tb testing.TB, f *fixture, item map[string]types.AttributeValue) {
	tb.Helper()
	if _, err := f.db.PutItem(tb.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item}); err != nil {
		tb.Fatalf("PutItem: %v", err)
	}
}
