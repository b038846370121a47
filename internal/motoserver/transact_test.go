package motoserver_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/lambdakit/lambdakit/internal/ddbstream"
)

// The server Start runs is moto patched by the launcher, unless moto is a
// version the launcher was not written for: then it says why, and the
// transaction tests below check plain moto instead.
func TestStartRunsPatchedMoto(t *testing.T) {
	out := moto.Server(t).Output()
	if line := fallbackLine(out); line != "" {
		t.Skipf("moto runs unpatched: %s", line)
	}
	if !strings.Contains(out, "lambdakit-moto: moto ") || !strings.Contains(out, " patched: ") {
		t.Fatalf("moto's output has no line saying the launcher patched it; got:\n%s", out)
	}
}

func fallbackLine(out string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "lambdakit-moto: running plain moto") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// A transaction writes all of its items or none: when a later item's
// condition fails, the items written before it are put back as they were.
func TestTransactWriteItemsIsAllOrNothing(t *testing.T) {
	db := dynamodb.NewFromConfig(moto.Config(t))
	table := createTable(t, db, false, false)

	t.Run("a failed second condition leaves the new first item absent", func(t *testing.T) {
		put(t, db, table, item("b", "1"))
		err := transact(db, putOp(table, item("a", "1"), ""), putOp(table, item("b", "2"), "attribute_not_exists(id)"))
		wantCancelled(t, err, "None", "ConditionalCheckFailed")
		wantAbsent(t, db, table, "a")
		wantValue(t, db, table, "b", "1")
	})

	t.Run("a failed second condition undoes an update of the first item", func(t *testing.T) {
		put(t, db, table, item("c", "1"))
		put(t, db, table, item("d", "1"))
		err := transact(db, updateOp(table, "c", "2"), conditionOp(table, "d", "v = :five"))
		wantCancelled(t, err, "None", "ConditionalCheckFailed")
		wantValue(t, db, table, "c", "1")
	})

	t.Run("a failed second condition undoes a delete of the first item", func(t *testing.T) {
		put(t, db, table, item("e", "1"))
		put(t, db, table, item("f", "1"))
		err := transact(db, deleteOp(table, "e"), conditionOp(table, "f", "v = :five"))
		wantCancelled(t, err, "None", "ConditionalCheckFailed")
		wantValue(t, db, table, "e", "1")
	})

	t.Run("an item named twice writes nothing", func(t *testing.T) {
		err := transact(db, putOp(table, item("g", "1"), ""), updateOp(table, "g", "2"))
		if err == nil {
			t.Fatal("a transaction naming one item twice succeeded; want a ValidationException")
		}
		wantAbsent(t, db, table, "g")
	})

	t.Run("an entry with two operations writes nothing", func(t *testing.T) {
		// moto checks this outside its rollback: plain moto 5.2.1 keeps the
		// first item; DynamoDB and the patched moto write nothing.
		if line := fallbackLine(moto.Server(t).Output()); line != "" {
			t.Skipf("plain moto keeps the first item here: %s", line)
		}
		two := putOp(table, item("i", "1"), "")
		two.Update = updateOp(table, "h", "2").Update
		err := transact(db, putOp(table, item("h", "1"), ""), two)
		if err == nil {
			t.Fatal("a transaction entry with Put and Update succeeded; want an error")
		}
		wantAbsent(t, db, table, "h")
		wantAbsent(t, db, table, "i")
	})

	t.Run("a successful transaction writes every item", func(t *testing.T) {
		other := createTable(t, db, false, false)
		put(t, db, table, item("k", "1"))
		put(t, db, other, item("l", "1"))
		err := transact(db,
			putOp(table, item("j", "1"), "attribute_not_exists(id)"),
			updateOp(table, "k", "2"),
			deleteOp(other, "l"),
			conditionOp(table, "b", "v = :one"),
		)
		if err != nil {
			t.Fatalf("TransactWriteItems: %v; want success", err)
		}
		wantValue(t, db, table, "j", "1")
		wantValue(t, db, table, "k", "2")
		wantAbsent(t, db, other, "l")
	})
}

// A table with a sort key: a new item rolled back leaves its partition as
// it was, and one already there keeps its value.
func TestTransactWriteItemsRollsBackSortKeyTables(t *testing.T) {
	ctx := context.Background()
	db := dynamodb.NewFromConfig(moto.Config(t))
	table := createTable(t, db, true, false)
	put(t, db, table, rangeItem("p", "2", "1"))
	put(t, db, table, rangeItem("q", "1", "1"))

	err := transact(db,
		putOp(table, rangeItem("new", "1", "1"), ""),
		putOp(table, rangeItem("p", "1", "1"), ""),
		putOp(table, rangeItem("q", "1", "2"), ""),
		putOp(table, rangeItem("p", "2", "2"), "attribute_not_exists(pk)"),
	)
	wantCancelled(t, err, "None", "None", "None", "ConditionalCheckFailed")
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range out.Items {
		got = append(got, fmt.Sprintf("%s/%s=%s", str(it["pk"]), str(it["sk"]), str(it["v"])))
	}
	slices.Sort(got)
	if want := "[p/2=1 q/1=1]"; fmt.Sprint(got) != want {
		t.Fatalf("after the cancelled transaction the table holds %v; want %s", got, want)
	}
}

// A table with a stream is all or nothing too, its stream included: a
// cancelled transaction leaves no stream record behind (the patch takes
// back the records it added, as it does the items, instead of copying the
// whole tables, which an outbox table's stream would make slower with
// every write).
func TestTransactWriteItemsOnStreamTableIsAllOrNothing(t *testing.T) {
	cfg := moto.Config(t)
	db := dynamodb.NewFromConfig(cfg)
	table := createTable(t, db, false, true)
	put(t, db, table, item("b", "1"))
	err := transact(db, putOp(table, item("a", "1"), ""), putOp(table, item("b", "2"), "attribute_not_exists(id)"))
	wantCancelled(t, err, "None", "ConditionalCheckFailed")
	wantAbsent(t, db, table, "a")
	wantValue(t, db, table, "b", "1")
	if err := transact(db, putOp(table, item("c", "1"), "")); err != nil {
		t.Fatal(err)
	}
	desc, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ddbstream.Read(t.Context(), dynamodbstreams.NewFromConfig(cfg), aws.ToString(desc.Table.LatestStreamArn), cfg.Region)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Change.Keys["id"].String())
	}
	if !slices.Equal(ids, []string{"b", "c"}) {
		t.Errorf("stream records of %v; want b's put and c's transaction only, none of the cancelled one", ids)
	}
}

// Rolling back a transaction puts back only its own items: writes to other
// items of the same table, made while it ran, stay. (moto's whole-table
// rollback would put back a copy of the table taken before them.)
func TestRolledBackTransactionsKeepConcurrentWrites(t *testing.T) {
	if line := fallbackLine(moto.Server(t).Output()); line != "" {
		t.Skipf("plain moto restores whole tables: %s", line)
	}
	db := dynamodb.NewFromConfig(moto.Config(t))
	table := createTable(t, db, false, false)
	put(t, db, table, item("taken", "1"))
	// Items enough that copying the table takes a while, as in a long
	// local run: that is the window in which moto's rollback loses writes.
	const filler = 2000
	fill(t, db, table, filler)

	const writers, perWriter, cancellers, perCanceller = 4, 40, 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter+cancellers*perCanceller)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(fmt.Sprintf("w%d-%d", w, i), "1")})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for c := range cancellers {
		wg.Go(func() {
			for i := range perCanceller {
				err := transact(db, putOp(table, item(fmt.Sprintf("c%d-%d", c, i), "1"), ""), putOp(table, item("taken", "2"), "attribute_not_exists(id)"))
				var tce *types.TransactionCanceledException
				if !errors.As(err, &tce) {
					errs <- fmt.Errorf("transaction %d-%d: %v; want TransactionCanceledException", c, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := count(t, db, table), filler+writers*perWriter+1; got != want {
		t.Fatalf("table holds %d items after the run; want %d (the filler, every PutItem, the taken item, no transaction's)", got, want)
	}
	wantValue(t, db, table, "taken", "1")
}

// count returns how many items table holds.
func count(t *testing.T, db *dynamodb.Client, table string) int {
	t.Helper()
	n := 0
	pages := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount, ConsistentRead: aws.Bool(true)})
	for range 1000 {
		if !pages.HasMorePages() {
			return n
		}
		out, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		n += int(out.Count)
	}
	t.Fatal("Scan: more than 1000 pages")
	return 0
}

// fill puts n items into table, 25 to a BatchWriteItem.
func fill(t *testing.T, db *dynamodb.Client, table string, n int) {
	t.Helper()
	for start := 0; start < n; start += 25 {
		var reqs []types.WriteRequest
		for i := start; i < min(start+25, n); i++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item(fmt.Sprintf("filler-%05d", i), "1")}})
		}
		out, err := db.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil || len(out.UnprocessedItems) > 0 {
			t.Fatalf("BatchWriteItem: %v, %d unprocessed", err, len(out.UnprocessedItems))
		}
	}
}

func item(id, v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"id": s(id), "v": s(v), "other": s("kept")}
}

func rangeItem(pk, sk, v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk), "v": s(v)}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func str(av types.AttributeValue) string {
	if v, ok := av.(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return fmt.Sprint(av)
}

func put(t *testing.T, db *dynamodb.Client, table string, it map[string]types.AttributeValue) {
	t.Helper()
	if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
}

func transact(db *dynamodb.Client, items ...types.TransactWriteItem) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	return err
}

func putOp(table string, it map[string]types.AttributeValue, cond string) types.TransactWriteItem {
	p := &types.Put{TableName: aws.String(table), Item: it}
	if cond != "" {
		p.ConditionExpression = aws.String(cond)
	}
	return types.TransactWriteItem{Put: p}
}

func updateOp(table, id, v string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": s(id)},
		UpdateExpression:          aws.String("SET v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": s(v)},
	}}
}

func deleteOp(table, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(table), Key: map[string]types.AttributeValue{"id": s(id)}}}
}

// conditionOp checks cond on item id; :five never holds (no value is "5"),
// :one holds for an item put with value "1".
func conditionOp(table, id, cond string) types.TransactWriteItem {
	vals := map[string]types.AttributeValue{}
	for _, name := range []string{":five", ":one"} {
		if strings.Contains(cond, name) {
			vals[name] = s(map[string]string{":five": "5", ":one": "1"}[name])
		}
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": s(id)},
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
	}}
}

func wantCancelled(t *testing.T, err error, codes ...string) {
	t.Helper()
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("TransactWriteItems: %v; want TransactionCanceledException", err)
	}
	var got []string
	for _, r := range tce.CancellationReasons {
		got = append(got, aws.ToString(r.Code))
	}
	if fmt.Sprint(got) != fmt.Sprint(codes) {
		t.Fatalf("cancellation reasons %v; want %v", got, codes)
	}
}

func get(t *testing.T, db *dynamodb.Client, table, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"id": s(id)}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem %s: %v", id, err)
	}
	return out.Item
}

func wantAbsent(t *testing.T, db *dynamodb.Client, table, id string) {
	t.Helper()
	if it := get(t, db, table, id); it != nil {
		t.Fatalf("item %s is %v after the transaction; want absent", id, it)
	}
}

// wantValue checks v, and that the untouched attribute is still there: a
// rollback must put back the whole item.
func wantValue(t *testing.T, db *dynamodb.Client, table, id, v string) {
	t.Helper()
	it := get(t, db, table, id)
	if it == nil {
		t.Fatalf("item %s is absent; want v=%s", id, v)
	}
	if got := str(it["v"]); got != v {
		t.Fatalf("item %s has v=%s; want %s", id, got, v)
	}
	if got := str(it["other"]); got != "kept" {
		t.Fatalf("item %s has other=%q; want %q", id, got, "kept")
	}
}
