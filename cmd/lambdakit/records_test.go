package main_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	lk "github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// recordJSON is what records -json prints for a record.
type recordJSON struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	State       string `json:"state"`
	Expiration  string `json:"expiration"`
	LeaseHolder string `json:"leaseHolder"`
	LeaseEnd    string `json:"leaseEnd"`
	Validation  string `json:"validation"`
	ResultBytes int    `json:"resultBytes"`
	Failure     string `json:"failure"`
	Effect      string `json:"effect"`
	Deleted     *bool  `json:"deleted"`
}

// cachedResult is what the handler returns, and the record caches.
const cachedResult = `{"status":"CHARGED","charge_id":"ch_1"}`

// recordsTable is a table of records written by the real middleware and
// store, under the prefix "payment", keyed on payment_id.
type recordsTable struct {
	name  string
	store *dynamostore.Store
	runs  map[string]int // handler runs per body
	batch lk.BatchFunc
}

func newRecordsTable(t *testing.T, db *dynamodb.Client) *recordsTable {
	t.Helper()
	rt := &recordsTable{name: testenv.Name(t), runs: map[string]int{}}
	if err := dynamostore.CreateTable(t.Context(), db, rt.name); err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(db, rt.name)
	if err != nil {
		t.Fatal(err)
	}
	rt.store = store
	h := lk.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		rt.runs[msg.Body]++
		return []byte(cachedResult), nil
	})
	idem := lk.Idempotent(rt.store, lk.KeyFromField("payment_id"), func(o *lk.Options) {
		o.Prefix = "payment"
		o.Logger = slog.New(slog.DiscardHandler)
	})
	rt.batch = lk.Batch(idem(h), func(o *lk.BatchOptions) { o.Logger = slog.New(slog.DiscardHandler) })
	return rt
}

// complete runs the handler on a payment, completing its record.
func (rt *recordsTable) complete(t *testing.T, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := rt.batch(ctx, lambdakittest.Event(lambdakittest.Message(body)))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("batch: %v, %v", err, resp.BatchItemFailures)
	}
}

// inProgress takes the lock of key as an owner whose lease ends at
// leaseEnd (in the past: one that crashed), as the middleware would.
func (rt *recordsTable) inProgress(t *testing.T, key string, leaseEnd time.Time) lk.IdempotencyRecord {
	t.Helper()
	rec := lk.IdempotencyRecord{
		ID: "payment#" + producer.DedupID(key), Status: lk.StatusInProgress,
		Expiration: time.Now().Add(time.Hour), InProgressExpiration: leaseEnd,
		Validation: "v-" + key, Lease: "lease-" + key,
	}
	_, acquired, err := rt.store.Acquire(t.Context(), rec, leaseEnd.Add(-time.Minute))
	if err != nil || !acquired {
		t.Fatalf("Acquire %s: %v, acquired %v", key, err, acquired)
	}
	return rec
}

func TestRecords(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=") // no table from the shell
	rt := newRecordsTable(t, db)
	paid := `{"payment_id":"pay_1","amount":100}`
	rt.complete(t, paid)
	now := time.Now()
	crashed := rt.inProgress(t, "pay_crashed", now.Add(-10*time.Minute))
	rt.inProgress(t, "pay_crashed_recently", now.Add(-30*time.Second))
	running := rt.inProgress(t, "pay_running", now.Add(10*time.Minute))
	base := []string{"-table", rt.name, "-prefix", "payment"}
	args := func(action string, more ...string) []string {
		return append(append([]string{"records", action}, base...), more...)
	}

	t.Run("get: a completed record, as text: exit 0", func(t *testing.T) {
		r := cli(t, env, "", args("get", "pay_1")...)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		for _, want := range []string{
			"id          payment#" + producer.DedupID("pay_1") + "\n",
			"status      COMPLETED\n",
			"state       completed: the next message with this key is skipped as a duplicate",
			fmt.Sprintf("result      %d bytes\n", len(cachedResult)),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		if !regexp.MustCompile(`\nvalidation  [0-9a-f]{64}\n`).MatchString(r.stdout) {
			t.Errorf("stdout lacks the validation hash:\n%s", r.stdout)
		}
		if strings.Contains(r.stdout, "ch_1") {
			t.Errorf("stdout shows the cached result; want its size only:\n%s", r.stdout)
		}
	})

	t.Run("get -json: one object with every field: exit 0", func(t *testing.T) {
		r := cli(t, env, "", args("get", "-json", "pay_running")...)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		got := jsonLines[recordJSON](t, r.stdout)
		if len(got) != 1 {
			t.Fatalf("%d records on stdout; want 1", len(got))
		}
		g := got[0]
		lease, _ := time.Parse(time.RFC3339, g.LeaseEnd)
		if g.ID != running.ID || g.Status != "INPROGRESS" || g.State != "in progress" || g.LeaseHolder != running.Lease ||
			!lease.Equal(running.Rounded().InProgressExpiration) || g.Validation != running.Validation || g.ResultBytes != 0 || g.Expiration == "" {
			t.Errorf("got %+v; want the running record %+v", g, running)
		}
	})

	t.Run("get: no record for the key: exit 1", func(t *testing.T) {
		r := cli(t, env, "", args("get", "pay_unknown")...)
		if r.code != 1 || !strings.Contains(r.stderr, `no record for key "pay_unknown" (id payment#`+producer.DedupID("pay_unknown")+")") {
			t.Errorf("exit status %d; want 1 and the id looked for\n%s", r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "has the prefix") || r.stdout != "" {
			t.Errorf("stdout %q, stderr %q; want nothing printed, and no doubt about a prefix that has records", r.stdout, r.stderr)
		}
	})

	t.Run("get: a prefix without records says so: exit 1", func(t *testing.T) {
		r := cli(t, env, "", "records", "get", "-table", rt.name, "-prefix", "paymnet", "pay_1")
		if r.code != 1 || !strings.Contains(r.stderr, `has the prefix "paymnet"`) {
			t.Errorf("exit status %d; want 1 and the prefix named\n%s", r.code, r.stderr)
		}
	})

	t.Run("a missing table: exit 3", func(t *testing.T) {
		for _, action := range []string{"get", "stuck"} {
			a := []string{"records", action, "-table", "no-such-table", "-prefix", "payment"}
			if action == "get" {
				a = append(a, "pay_1")
			}
			r := cli(t, env, "", a...)
			if r.code != 3 || !strings.Contains(r.stderr, `table "no-such-table" does not exist at `+srv.URL) {
				t.Errorf("%s: exit status %d; want 3 and the table named\n%s", action, r.code, r.stderr)
			}
		}
	})

	t.Run("-table from IDEMPOTENCY_TABLE", func(t *testing.T) {
		r := cli(t, append(env, "IDEMPOTENCY_TABLE="+rt.name), "", "records", "get", "-prefix", "payment", "pay_1")
		if r.code != 0 {
			t.Errorf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
	})

	t.Run("stuck: in-progress records whose lease ended, by age: exit 0", func(t *testing.T) {
		r := cli(t, env, "", args("stuck", "-json")...)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		got := map[string]string{}
		for _, rec := range jsonLines[recordJSON](t, r.stdout) {
			got[rec.ID] = rec.State
		}
		want := map[string]string{crashed.ID: "lease ended", "payment#" + producer.DedupID("pay_crashed_recently"): "lease ended"}
		if len(got) != len(want) || got[crashed.ID] != want[crashed.ID] {
			t.Errorf("stuck -json listed %v; want %v", got, want)
		}
		r = cli(t, env, "", args("stuck", "-older-than", "5m")...)
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(r.stdout, crashed.ID+"  lease ended ") {
			t.Errorf("stuck -older-than 5m: exit status %d, stdout:\n%s\nwant the record whose lease ended 10 minutes ago only", r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "1 in progress with a lease that ended more than 5m0s ago") {
			t.Errorf("stderr lacks the count:\n%s", r.stderr)
		}
		r = cli(t, env, "", args("stuck", "-older-than", "1h")...)
		if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "0 in progress") {
			t.Errorf("stuck -older-than 1h: exit status %d, stdout %q, stderr %q; want 0, nothing listed, and the count", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("stuck: a prefix without records: exit 1", func(t *testing.T) {
		r := cli(t, env, "", "records", "stuck", "-table", rt.name, "-prefix", "refund")
		if r.code != 1 || !strings.Contains(r.stderr, `has the prefix "refund"`) {
			t.Errorf("exit status %d; want 1 and the prefix named\n%s", r.code, r.stderr)
		}
	})

	t.Run("delete: declined at the prompt, the record stays: exit 1", func(t *testing.T) {
		for _, answer := range []string{"n\n", "", "maybe\n"} {
			r := cli(t, env, answer, args("delete", "pay_1")...)
			if r.code != 1 || !strings.Contains(r.stderr, "[y/N]") || !strings.Contains(r.stderr, "not deleted") {
				t.Errorf("answer %q: exit status %d; want 1, the prompt and 'not deleted'\n%s", answer, r.code, r.stderr)
			}
		}
		if r := cli(t, env, "", args("get", "pay_1")...); r.code != 0 {
			t.Errorf("the record is gone after declined deletes:\n%s", r.stderr)
		}
	})

	t.Run("delete: confirmed, and the payment runs again: exit 0", func(t *testing.T) {
		rt.complete(t, paid) // a duplicate: skipped
		if n := rt.runs[paid]; n != 1 {
			t.Fatalf("handler ran %d times before the delete; want 1", n)
		}
		r := cli(t, env, "y\n", args("delete", "pay_1")...)
		if r.code != 0 || !strings.Contains(r.stderr, "deleted payment#"+producer.DedupID("pay_1")) {
			t.Fatalf("exit status %d; want 0 and the deletion reported\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "status      COMPLETED") {
			t.Errorf("stdout does not show the record before deleting it:\n%s", r.stdout)
		}
		if r := cli(t, env, "", args("get", "pay_1")...); r.code != 1 {
			t.Errorf("get after delete: exit status %d; want 1", r.code)
		}
		rt.complete(t, paid)
		if n := rt.runs[paid]; n != 2 {
			t.Errorf("handler ran %d times after the delete; want 2", n)
		}
	})

	t.Run("delete: a live lease is refused without -force: exit 1", func(t *testing.T) {
		r := cli(t, env, "", args("delete", "-yes", "pay_running")...)
		if r.code != 1 || !strings.Contains(r.stderr, "its owner may still be running") {
			t.Errorf("exit status %d; want 1 and the reason\n%s", r.code, r.stderr)
		}
		r = cli(t, env, "", args("delete", "-yes", "-force", "-json", "pay_running")...)
		if r.code != 0 {
			t.Fatalf("-force: exit status %d; want 0\n%s", r.code, r.stderr)
		}
		got := jsonLines[recordJSON](t, r.stdout)
		if len(got) != 1 || got[0].ID != running.ID || got[0].Deleted == nil || !*got[0].Deleted {
			t.Errorf("-json printed %+v; want the record with deleted: true", got)
		}
	})

	t.Run("delete: a stuck record goes with -yes: exit 0", func(t *testing.T) {
		r := cli(t, env, "", args("delete", "-yes", "-json", "pay_crashed")...)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if got := jsonLines[recordJSON](t, r.stdout); len(got) != 1 || got[0].State != "lease ended" || got[0].Deleted == nil || !*got[0].Deleted {
			t.Errorf("-json printed %+v; want the stuck record with deleted: true", got)
		}
	})

	t.Run("usage errors exit 2 and touch nothing", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"no action", []string{"records"}, "want get, delete, stuck or failed"},
			{"unknown action", []string{"records", "list"}, `unknown action "list"`},
			{"no key", []string{"records", "get", "-table", rt.name, "-prefix", "payment"}, "get needs a KEY"},
			{"two keys", []string{"records", "get", "-table", rt.name, "-prefix", "payment", "a", "b"}, "want one KEY"},
			{"flags after the key", []string{"records", "get", "-table", rt.name, "pay_1", "-prefix", "payment"}, "flag -prefix after the arguments"},
			{"no prefix", []string{"records", "get", "-table", rt.name, "pay_1"}, "-prefix is required"},
			{"no table", []string{"records", "get", "-prefix", "payment", "pay_1"}, "-table is required"},
			{"prefix with its #", []string{"records", "get", "-table", rt.name, "-prefix", "payment#", "pay_1"}, "without its '#'"},
			{"-yes with get", []string{"records", "get", "-yes", "-table", rt.name, "-prefix", "payment", "pay_1"}, "-yes is for delete only"},
			{"-older-than with delete", []string{"records", "delete", "-older-than", "1m", "-table", rt.name, "-prefix", "payment", "pay_1"}, "-older-than is for stuck only"},
			{"stuck with a key", []string{"records", "stuck", "-table", rt.name, "-prefix", "payment", "pay_1"}, "stuck takes no KEY"},
			{"negative age", []string{"records", "stuck", "-older-than", "-1m", "-table", rt.name, "-prefix", "payment"}, "-older-than -1m0s"},
			{"unknown flag", []string{"records", "get", "-key", "pay_1"}, "flag provided but not defined"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := cli(t, env, "y\n", tc.args...)
				if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
					t.Errorf("exit status %d; want 2 and %q\n%s", r.code, tc.want, r.stderr)
				}
				if !strings.Contains(r.stderr, "lambdakit records -h") && !strings.Contains(r.stderr, "Usage: lambdakit records") {
					t.Errorf("no pointer to the usage:\n%s", r.stderr)
				}
			})
		}
		if r := cli(t, env, "", args("get", "pay_crashed_recently")...); r.code != 0 {
			t.Errorf("a record is gone after usage errors:\n%s", r.stderr)
		}
	})

	t.Run("-h documents the command: exit 0", func(t *testing.T) {
		r := cli(t, nil, "", "records", "-h")
		if r.code != 0 {
			t.Errorf("exit status %d; want 0", r.code)
		}
		for _, want := range []string{"Usage: lambdakit records get", "<prefix>#<sha256 hex of the key>", "-table table", "IDEMPOTENCY_TABLE",
			"-prefix prefix", "-json", "-yes", "-older-than duration", "-live", "AWS_ENDPOINT_URL_DYNAMODB", "scan the whole", "-status-attr", "docs/operations.md", "Exit status", "  3    the table does not exist"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("-h lacks %q", want)
			}
		}
	})
}

// newLedgerTable returns a table of ledger rows as functions/payment keeps
// them, the record on the business item (readable IDs, the key and status
// attributes renamed to payment_id and record_status, kept forever), and
// its store. The row of pay_1 is charged: its own status attribute holds
// CHARGED.
func newLedgerTable(t *testing.T, db *dynamodb.Client) (string, *dynamostore.Store) {
	t.Helper()
	names := func(o *dynamostore.Options) { o.KeyAttr, o.StatusAttr = "payment_id", "record_status" }
	table := testenv.Name(t)
	if err := dynamostore.CreateTable(t.Context(), db, table, names); err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(db, table, names)
	if err != nil {
		t.Fatal(err)
	}
	idem := lk.Idempotent(store, lk.KeyFromField("payment_id"), func(o *lk.Options) {
		o.Prefix, o.ReadableIDs, o.TTL = "payment", true, lk.NeverExpire
		o.Logger = slog.New(slog.DiscardHandler)
	})
	h := idem(lk.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return []byte(cachedResult), dynamostore.SetItem(ctx, map[string]types.AttributeValue{"status": &types.AttributeValueMemberS{Value: "CHARGED"}})
	}))
	batch := lk.Batch(h, func(o *lk.BatchOptions) { o.Logger = slog.New(slog.DiscardHandler) })
	resp, err := batch(t.Context(), lambdakittest.Event(lambdakittest.Message(`{"payment_id":"pay_1"}`)))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("batch: %v, %v", err, resp.BatchItemFailures)
	}
	return table, store
}

// Records on a business item, as functions/payment keeps them on its
// ledger rows: readable IDs, the key and status attributes renamed, kept
// forever. get finds a completed one by its key and says it never
// expires; stuck lists an abandoned lock by its readable ID.
func TestRecordsOnABusinessItem(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	table, store := newLedgerTable(t, db)
	leaseEnd := time.Now().Add(-10 * time.Minute)
	if _, ok, err := store.Acquire(t.Context(), lk.IdempotencyRecord{ID: "payment#pay_crashed", Status: lk.StatusInProgress,
		Expiration: time.Now().Add(time.Hour), InProgressExpiration: leaseEnd, Lease: "l"}, leaseEnd.Add(-time.Minute)); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", err, ok)
	}
	flags := []string{"-table", table, "-prefix", "payment", "-readable-ids", "-key-attr", "payment_id", "-status-attr", "record_status"}

	r := cli(t, env, "", append(append([]string{"records", "get"}, flags...), "pay_1")...)
	if r.code != 0 {
		t.Fatalf("get: exit status %d; want 0\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"id          payment#pay_1\n", "status      COMPLETED\n", "state       completed: ", "expires     never\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("get: stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, env, "", append([]string{"records", "stuck"}, flags...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "payment#pay_crashed  lease ended ") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("stuck: exit status %d, stdout %q; want the abandoned lock alone, by its readable ID\n%s", r.code, r.stdout, r.stderr)
	}
}

// A ledger row read without -status-attr shows its own status (CHARGED)
// where the record's would be. That is no record status: get and delete
// refuse it with a usage error naming -status-attr, and the row stays
// (deleted, the next copy of the message would charge again).
func TestRecordsRefuseAnItemWhoseStatusIsNoRecordStatus(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	table, _ := newLedgerTable(t, db)
	flags := []string{"-table", table, "-prefix", "payment", "-readable-ids", "-key-attr", "payment_id"}
	for _, args := range [][]string{{"get"}, {"get", "-json"}, {"delete", "-yes"}, {"delete", "-yes", "-force", "-json"}} {
		r := cli(t, env, "y\n", append(append(append([]string{"records"}, args...), flags...), "pay_1")...)
		if r.code != 2 || !strings.Contains(r.stderr, "-status-attr") || !strings.Contains(r.stderr, `"CHARGED"`) {
			t.Errorf("%v: exit status %d; want 2, naming -status-attr and the status found\n%s", args, r.code, r.stderr)
		}
		if strings.Contains(r.stdout, "lease ended") || strings.Contains(r.stderr, "deleted payment#pay_1") {
			t.Errorf("%v: the row was taken for an abandoned lock:\n%s%s", args, r.stdout, r.stderr)
		}
	}
	out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: &table, Key: map[string]types.AttributeValue{"payment_id": &types.AttributeValueMemberS{Value: "payment#pay_1"}}})
	if err != nil || out.Item["status"] == nil {
		t.Errorf("the ledger row is gone after the refused deletes: %v, %v", out, err)
	}
}

// A table whose key is not id, read without -key-attr: DynamoDB refuses
// the key with a ValidationException that names no attribute; records
// names the flag and the table's key.
func TestRecordsNameTheTablesKeyAttribute(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	table, _ := newLedgerTable(t, db)
	r := cli(t, env, "", "records", "get", "-table", table, "-prefix", "payment", "-readable-ids", "-status-attr", "record_status", "pay_1")
	if r.code != 2 || !strings.Contains(r.stderr, "give -key-attr payment_id") || strings.Contains(r.stderr, "ValidationException") {
		t.Errorf("exit status %d; want 2 and -key-attr payment_id named, without DynamoDB's raw error\n%s", r.code, r.stderr)
	}
}

// A record completed with a failure (its work ran, then its completion was
// refused for good): get shows the failure and says that the next message
// fails without running the work, which the engine then does; failed lists
// such records alone, as text and JSON.
func TestRecordsShowAFailedRecord(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	rt := newRecordsTable(t, db)
	rt.complete(t, `{"payment_id":"pay_1"}`)
	rt.inProgress(t, "pay_crashed", time.Now().Add(-10*time.Minute))
	failed := rt.inProgress(t, "pay_failed", time.Now().Add(10*time.Minute))
	failed.Status, failed.Failure = lk.StatusCompleted, "completion rejected: item over 400 KB"
	if err := rt.store.Complete(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	args := func(more ...string) []string {
		return append([]string{"records", more[0], "-table", rt.name, "-prefix", "payment"}, more[1:]...)
	}

	r := cli(t, env, "", args("get", "pay_failed")...)
	if r.code != 0 {
		t.Fatalf("get: exit status %d; want 0\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"state       failed: ", "fails permanently without running the work again", "failure     " + failed.Failure + "\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("get: stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "skipped as a duplicate") {
		t.Errorf("get: a failed record is told as a duplicate that gets the cached result:\n%s", r.stdout)
	}
	r = cli(t, env, "", args("get", "-json", "pay_failed")...)
	if got := jsonLines[recordJSON](t, r.stdout); r.code != 0 || len(got) != 1 || got[0].State != "failed" || got[0].Failure != failed.Failure {
		t.Errorf("get -json: exit status %d, %+v; want state failed and the failure\n%s", r.code, got, r.stderr)
	}

	r = cli(t, env, "", args("failed")...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, failed.ID+"  expires ") || strings.Count(r.stdout, "\n") != 1 ||
		!strings.Contains(r.stdout, fmt.Sprintf("failure %q", failed.Failure)) || !strings.Contains(r.stderr, "1 completed with a failure") {
		t.Errorf("failed: exit status %d, stdout %q; want the failed record alone, with its failure\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, env, "", args("failed", "-json")...)
	if got := jsonLines[recordJSON](t, r.stdout); r.code != 0 || len(got) != 1 || got[0].ID != failed.ID || got[0].Failure != failed.Failure {
		t.Errorf("failed -json: exit status %d, %+v; want the failed record alone\n%s", r.code, got, r.stderr)
	}

	// What get said: the next message with the key fails, unrun.
	body := `{"payment_id":"pay_failed"}`
	resp, err := rt.batch(t.Context(), lambdakittest.Event(lambdakittest.Message(body)))
	if err == nil && len(resp.BatchItemFailures) != 1 || rt.runs[body] != 0 {
		t.Errorf("the next message: %v, %v, handler runs %d; want it failed, unrun", err, resp.BatchItemFailures, rt.runs[body])
	}
}

// A record whose owner stopped after its effect (lambdakit.Options.StoreEffect
// kept it): get shows the effect and says that the next message fails
// permanently without running, not that it takes the record over.
func TestRecordsShowARecordStoppedAfterItsEffect(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	rt := newRecordsTable(t, db)
	rec := rt.inProgress(t, "pay_stopped", time.Now().Add(-10*time.Minute))
	if err := rt.store.MarkEffect(t.Context(), rec.ID, rec.Lease, "charge ch_9"); err != nil {
		t.Fatal(err)
	}
	r := cli(t, env, "", "records", "get", "-table", rt.name, "-prefix", "payment", "pay_stopped")
	for _, want := range []string{"state       stopped after its effect: ", "fails permanently without running", "effect      charge ch_9\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("get: exit status %d, stdout lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	r = cli(t, env, "", "records", "get", "-json", "-table", rt.name, "-prefix", "payment", "pay_stopped")
	if got := jsonLines[recordJSON](t, r.stdout); r.code != 0 || len(got) != 1 || got[0].State != "stopped after its effect" || got[0].Effect != "charge ch_9" {
		t.Errorf("get -json: exit status %d, %+v; want the state and the effect\n%s", r.code, got, r.stderr)
	}
}

// A table in Powertools' composite-key layout, shared with another
// function: with -sort-key-attr and -static-pk-value, get finds the
// function's record and stuck lists its abandoned lock, not the other
// function's; without them, records names the flags.
func TestRecordsOnACompositeKeyTable(t *testing.T) {
	srv := moto.Server(t)
	db := dynamodb.NewFromConfig(moto.Config(t))
	env := awsEnv("DYNAMODB", srv.URL, "IDEMPOTENCY_TABLE=")
	table := testenv.Name(t)
	layout := func(pk string) func(*dynamostore.Options) {
		return func(o *dynamostore.Options) { o.SortKeyAttr, o.StaticPartitionKey = "sk", pk }
	}
	if err := dynamostore.CreateTable(t.Context(), db, table, layout("idempotency#payments")); err != nil {
		t.Fatal(err)
	}
	leaseEnd := time.Now().Add(-10 * time.Minute)
	for _, pk := range []string{"idempotency#payments", "idempotency#refunds"} {
		store, err := dynamostore.New(db, table, layout(pk))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"pay_done", "pay_crashed"} {
			rec := lk.IdempotencyRecord{ID: lk.RecordID("payment", key), Status: lk.StatusInProgress,
				Expiration: time.Now().Add(time.Hour), InProgressExpiration: leaseEnd, Lease: pk + key}
			if _, ok, err := store.Acquire(t.Context(), rec, leaseEnd.Add(-time.Minute)); err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", err, ok)
			}
			if key == "pay_done" {
				rec.Data = []byte(cachedResult)
				if err := store.Complete(t.Context(), rec); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	flags := []string{"-table", table, "-prefix", "payment", "-sort-key-attr", "sk", "-static-pk-value", "idempotency#payments"}

	r := cli(t, env, "", append(append([]string{"records", "get"}, flags...), "pay_done")...)
	if r.code != 0 || !strings.Contains(r.stdout, "status      COMPLETED\n") {
		t.Errorf("get: exit status %d; want 0 and the completed record\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, env, "", append([]string{"records", "stuck", "-json"}, flags...)...)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `"leaseHolder":"idempotency#paymentspay_crashed"`) {
		t.Errorf("stuck: exit status %d, stdout %q; want the payments function's abandoned lock alone\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, env, "", "records", "get", "-table", table, "-prefix", "payment", "pay_done")
	if r.code != 2 || !strings.Contains(r.stderr, "give -sort-key-attr sk") {
		t.Errorf("get without the layout's flags: exit status %d; want 2, naming -sort-key-attr sk\n%s", r.code, r.stderr)
	}
	r = cli(t, env, "", "records", "get", "-table", table, "-prefix", "payment", "-sort-key-attr", "sk", "pay_done")
	if r.code != 2 || !strings.Contains(r.stderr, "-static-pk-value") {
		t.Errorf("get with -sort-key-attr alone: exit status %d; want 2, naming -static-pk-value\n%s", r.code, r.stderr)
	}
	// stuck and failed find nothing without the layout, or with another
	// sort key's name: they say which flag to give, not that -prefix is
	// wrong.
	for _, layout := range [][]string{nil, {"-sort-key-attr", "sort_key", "-static-pk-value", "idempotency#payments"}} {
		for _, action := range []string{"stuck", "failed"} {
			r = cli(t, env, "", append([]string{"records", action, "-table", table, "-prefix", "payment"}, layout...)...)
			if r.code != 2 || !strings.Contains(r.stderr, "give -sort-key-attr sk") {
				t.Errorf("%s %q: exit status %d; want 2, naming -sort-key-attr sk\n%s", action, layout, r.code, r.stderr)
			}
		}
	}
}
