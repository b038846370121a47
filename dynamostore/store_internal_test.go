package dynamostore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// recordRequests builds what the store sends for a new record on its item
// (the sample's payment, with its payment.charged on the record), without
// the network: the lock's put, the item's checks (SetItem's, then
// PublishOnRecord's with the message, then the completion's) and the
// completion's update, as Acquire and Complete build them before the SDK
// sends them. It is what the store adds per record to the floor's two
// requests.
func recordRequests(tb testing.TB) func(i int) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	item := map[string]types.AttributeValue{
		"payment_status": str("CHARGED"),
		"amount":         &types.AttributeValueMemberN{Value: "1299"},
		"currency":       str("EUR"),
		"order_id":       str("ord_1"),
		"customer_id":    str("cus_1"),
		"recorded_at":    str("2026-01-01T00:00:00.123456789Z"),
		"charge_id":      str("ch_pay_1"),
	}
	message := map[string]types.AttributeValue{
		"name": str("payment.charged"), "queueUrl": str("http://127.0.0.1/123456789012/events.fifo"),
		"body":    str(`{"type":"payment.charged","payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":1299,"currency":"EUR","charge_id":"ch_pay_1"}`),
		"groupId": str("cus_1"), "attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"type": str("payment.charged")}},
	}
	return func(i int) {
		rec := lambdakit.IdempotencyRecord{ID: "payment#pay_" + strconv.Itoa(i), Lease: "lease", Validation: "v",
			InProgressExpiration: now.Add(time.Minute)}
		lock := rec
		lock.Status = lambdakit.StatusInProgress
		_ = s.creation(lock.Rounded(), now, nil)
		if err := s.CheckItem(item); err != nil {
			tb.Fatal(err)
		}
		// What SetItem and then PublishOnRecord check, each with what is
		// staged so far.
		staged := []any{RecordMessage(message)}
		if err := s.CheckStaging(lambdakit.IdempotencyRecord{ID: rec.ID, Lease: rec.Lease, Item: item}); err != nil {
			tb.Fatal(err)
		}
		if err := s.CheckStaging(lambdakit.IdempotencyRecord{ID: rec.ID, Lease: rec.Lease, Item: item, Staged: staged}); err != nil {
			tb.Fatal(err)
		}
		rec.Item, rec.Staged, rec.Data = item, staged, []byte(`{"status":"CHARGED","charge_id":"ch_pay_1"}`)
		if err := s.checkItem(rec); err != nil {
			tb.Fatal(err)
		}
		rec, msgs := s.onRecord(rec)
		if err := s.checkStorable(rec, msgs); err != nil {
			tb.Fatal(err)
		}
		_ = s.completion(rec.Rounded(), msgs)
	}
}

func BenchmarkRecordRequests(b *testing.B) {
	build := recordRequests(b)
	b.ReportAllocs()
	for i := range b.N {
		build(i)
	}
}

// The store's fixed cost per record, which the CPU target holds against
// the floor's, stays small: a new record's requests and checks, with its
// event on the record, take at most 20 allocations (18 with go1.26; 31
// when each string and number value of a request was an allocation of
// its own, the lock and the completion came back as pointers, and a
// record's one message took three for its list; before that 37, 52
// when every request made its table name, statuses and condition again,
// the completion copied the handler's item to add the messages, each
// check built the messages' list, and an integer's digits were copied to
// check it; 62 when the completion sorted its item's names into a new
// slice and each CheckStaging built the record's item to count it; 86,
// without the event's checks, when every request built a map of all the
// placeholder names, CheckItem a slice of the record's own names, and the
// completion its expression by repeated concatenation).
func TestRecordRequestsAllocations(t *testing.T) {
	build := recordRequests(t)
	i := 0
	if n := testing.AllocsPerRun(100, func() { build(i); i++ }); n > 20 {
		t.Errorf("a new record's requests take %v allocations to build; want at most 20", n)
	}
}

// TestCompletionNamesEveryAttributeInSortedOrder checks the completion's
// placeholders for an item wider than the names it sorts on the stack
// (16): every attribute is set, the i-th placeholder names the i-th name in
// sorted order, and a retried completion is the same request.
func TestCompletionNamesEveryAttributeInSortedOrder(t *testing.T) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	item := map[string]types.AttributeValue{}
	for i := range n {
		item["attr_"+strconv.Itoa(n-i)] = str(strconv.Itoa(i)) // names and values in different orders
	}
	names := slices.Sorted(maps.Keys(item))
	rec := lambdakit.IdempotencyRecord{ID: "payment#1", Lease: "lease", Item: item}
	first, again := s.completion(rec, nil), s.completion(rec, nil)
	if *first.UpdateExpression != *again.UpdateExpression || !maps.Equal(first.ExpressionAttributeNames, again.ExpressionAttributeNames) {
		t.Fatalf("two completions of one record differ:\n%s\n%s", *first.UpdateExpression, *again.UpdateExpression)
	}
	for i, name := range names {
		n, v := itemPlaceholders(i)
		if got := first.ExpressionAttributeNames[n]; got != name {
			t.Errorf("%s names %q; want %q", n, got, name)
		}
		if first.ExpressionAttributeValues[v] != item[name] || again.ExpressionAttributeValues[v] != item[name] {
			t.Errorf("%s is not the value of %q", v, name)
		}
		if !strings.Contains(*first.UpdateExpression, ", "+n+" = "+v) {
			t.Errorf("the update expression does not set %s = %s: %s", n, v, *first.UpdateExpression)
		}
	}
}

// TestCompletionOfEachShapeIsBuiltForIt checks the completion's kept form
// (completionForm) against records whose shapes follow one another: items
// of the same size with other names, the same names with another optional
// attribute set or unset, and back. Each completion, made one after the
// other and from many goroutines at once, must be the request a Store
// that never saw another record builds for it.
func TestCompletionOfEachShapeIsBuiltForIt(t *testing.T) {
	newS := func() *Store {
		s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	msgs := &types.AttributeValueMemberL{Value: []types.AttributeValue{str("m")}}
	base := lambdakit.IdempotencyRecord{ID: "payment#1", Lease: "lease"}
	var recs []lambdakit.IdempotencyRecord
	var withMsgs []bool
	for _, item := range []map[string]types.AttributeValue{
		nil,
		{"amount": str("1"), "status": str("CHARGED")},
		{"amount": str("2"), "currency": str("EUR")}, // as many names, one other
		{"amount": str("3"), "status": str("CHARGED"), "currency": str("EUR")},
	} {
		for mask := range 32 {
			r := base
			r.Item = item
			if mask&1 != 0 {
				r.Expiration = time.Unix(1_900_000_000, 0)
			}
			if mask&2 != 0 {
				r.Failure = "failed"
			}
			if mask&4 != 0 {
				r.Effect = "charged"
			}
			if mask&8 != 0 {
				r.Data = []byte(`{"ok":true}`)
			}
			recs, withMsgs = append(recs, r), append(withMsgs, mask&16 != 0)
		}
	}
	msgsOf := func(i int) *types.AttributeValueMemberL {
		if withMsgs[i] {
			return msgs
		}
		return nil
	}
	want := make([]types.Update, len(recs))
	for i, r := range recs {
		want[i] = newS().completion(r, msgsOf(i))
	}
	same := func(got, want types.Update) bool {
		return *got.UpdateExpression == *want.UpdateExpression &&
			maps.Equal(got.ExpressionAttributeNames, want.ExpressionAttributeNames) &&
			reflect.DeepEqual(got.ExpressionAttributeValues, want.ExpressionAttributeValues)
	}
	s := newS()
	// In order, backwards, and every other one: each shape after others.
	order := slices.Collect(func(yield func(int) bool) {
		for i := range recs {
			yield(i)
		}
		for i := len(recs) - 1; i >= 0; i-- {
			yield(i)
		}
		for i := 0; i < len(recs); i += 2 {
			yield(i)
		}
	})
	for _, i := range order {
		if got := s.completion(recs[i], msgsOf(i)); !same(got, want[i]) {
			t.Fatalf("record %d: completion %s %v; want %s %v", i, *got.UpdateExpression, got.ExpressionAttributeNames,
				*want[i].UpdateExpression, want[i].ExpressionAttributeNames)
		}
	}
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for k := range 400 {
				i := (g*131 + k*7) % len(recs)
				if !same(s.completion(recs[i], msgsOf(i)), want[i]) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of 3200 completions made at once were not their record's", n)
	}
}

// TestCompletionExprLenBoundsTheCompletion checks that completionExprLen,
// which SetItem holds to DynamoDB's expression limit before the work, is
// never shorter than the expression the completion writes, whichever of
// the record's optional clauses it has.
func TestCompletionExprLenBoundsTheCompletion(t *testing.T) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
	if err != nil {
		t.Fatal(err)
	}
	msgs := &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"body": str("b")}}}}
	for _, n := range []int{0, 1, 9, 10, 11, 100, 101} {
		item := map[string]types.AttributeValue{}
		for i := range n {
			item["a"+strconv.Itoa(i)] = str("v")
		}
		for mask := range 32 {
			rec := lambdakit.IdempotencyRecord{ID: "payment#1", Lease: "lease", Validation: "v", Item: item}
			if mask&1 != 0 {
				rec.Expiration = time.Unix(1e9, 0)
			}
			if mask&2 != 0 {
				rec.Data = []byte(`"r"`)
			}
			if mask&4 != 0 {
				rec.Failure = "f"
			}
			if mask&8 != 0 {
				rec.Effect = "e"
			}
			var m *types.AttributeValueMemberL
			if mask&16 != 0 {
				m = msgs
			}
			if got, bound := len(*s.completion(rec, m).UpdateExpression), completionExprLen(n); got > bound {
				t.Fatalf("%d attributes, options %05b: the completion's expression is %d bytes; completionExprLen says at most %d", n, mask, got, bound)
			}
		}
	}
}

// TestCompletionNamesExactlyThePlaceholdersItUses checks every
// completion of records whose shapes follow one another, one after the
// other and from goroutines at once, against DynamoDB's rules rather than
// against another completion: its names and values are exactly the
// placeholders its expressions use (DynamoDB refuses one they do not),
// the i-th item placeholder names the i-th of the record's own item's
// names in sorted order, and its value is that attribute's. The items
// include some wider than the placeholders made ahead (itemPlaceholders),
// and some of as many attributes under other names.
func TestCompletionNamesExactlyThePlaceholdersItUses(t *testing.T) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
	if err != nil {
		t.Fatal(err)
	}
	wide := func(prefix string, n int) map[string]types.AttributeValue {
		item := map[string]types.AttributeValue{}
		for i := range n {
			item[prefix+strconv.Itoa(i)] = str(prefix + "=" + strconv.Itoa(i))
		}
		return item
	}
	items := []map[string]types.AttributeValue{nil, wide("a", 2), wide("b", 2), wide("a", 40), wide("c", 40), wide("a", 41)}
	msgs := &types.AttributeValueMemberL{Value: []types.AttributeValue{str("m")}}
	type rec struct {
		r    lambdakit.IdempotencyRecord
		msgs *types.AttributeValueMemberL
	}
	var recs []rec
	for _, item := range items {
		for mask := range 32 {
			r := lambdakit.IdempotencyRecord{ID: "payment#" + strconv.Itoa(len(recs)), Lease: "lease" + strconv.Itoa(len(recs)), Item: item}
			if mask&1 != 0 {
				r.Expiration = time.Unix(1_900_000_000+int64(len(recs)), 0)
			}
			if mask&2 != 0 {
				r.Failure = "failed " + strconv.Itoa(len(recs))
			}
			if mask&4 != 0 {
				r.Effect = "charged " + strconv.Itoa(len(recs))
			}
			if mask&8 != 0 {
				r.Data = []byte(strconv.Itoa(len(recs)))
			}
			var m *types.AttributeValueMemberL
			if mask&16 != 0 {
				m = msgs
			}
			recs = append(recs, rec{r, m})
		}
	}
	placeholder := regexp.MustCompile(`[#:][A-Za-z0-9_]+`)
	check := func(c rec) string {
		u := s.completion(c.r, c.msgs)
		usedNames, usedValues := map[string]bool{}, map[string]bool{}
		for _, p := range placeholder.FindAllString(*u.UpdateExpression+" "+*u.ConditionExpression, -1) {
			if p[0] == '#' {
				usedNames[p] = true
			} else {
				usedValues[p] = true
			}
		}
		if !slices.Equal(slices.Sorted(maps.Keys(usedNames)), slices.Sorted(maps.Keys(u.ExpressionAttributeNames))) ||
			!slices.Equal(slices.Sorted(maps.Keys(usedValues)), slices.Sorted(maps.Keys(u.ExpressionAttributeValues))) {
			return fmt.Sprintf("%s uses %v and %v; the request names %v and %v", c.r.ID, slices.Sorted(maps.Keys(usedNames)), slices.Sorted(maps.Keys(usedValues)),
				slices.Sorted(maps.Keys(u.ExpressionAttributeNames)), slices.Sorted(maps.Keys(u.ExpressionAttributeValues)))
		}
		attrs, _ := c.r.Item.(map[string]types.AttributeValue)
		for i, name := range slices.Sorted(maps.Keys(attrs)) {
			n, v := itemPlaceholders(i)
			if u.ExpressionAttributeNames[n] != name || u.ExpressionAttributeValues[v] != attrs[name] {
				return fmt.Sprintf("%s: %s names %q, %s is %v; want %q and its value", c.r.ID, n, u.ExpressionAttributeNames[n], v, u.ExpressionAttributeValues[v], name)
			}
		}
		want := map[string]types.AttributeValue{":lease": str(c.r.Lease)}
		if !c.r.Expiration.IsZero() {
			want[":exp"] = num(c.r.Expiration.Unix())
		}
		if c.r.Failure != "" {
			want[":failure"] = str(c.r.Failure)
		}
		if c.r.Effect != "" {
			want[":effect"] = str(c.r.Effect)
		}
		if len(c.r.Data) > 0 {
			want[":data"] = str(string(c.r.Data))
		}
		for k, v := range want {
			if !reflect.DeepEqual(u.ExpressionAttributeValues[k], v) {
				return fmt.Sprintf("%s: %s is %v; want %v", c.r.ID, k, u.ExpressionAttributeValues[k], v)
			}
		}
		if c.msgs != nil && u.ExpressionAttributeValues[":messages"] != c.msgs {
			return fmt.Sprintf("%s: :messages is not the record's messages", c.r.ID)
		}
		return ""
	}
	// Each shape after others: in turn, then each item after the
	// others with the same optional attributes.
	for k := range recs {
		if bad := check(recs[k]); bad != "" {
			t.Fatal(bad)
		}
	}
	for mask := range 32 {
		for i := range items {
			if bad := check(recs[i*32+mask]); bad != "" {
				t.Fatal(bad)
			}
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	for g := range 4 {
		wg.Go(func() {
			for k := range 200 {
				if bad := check(recs[(g*61+k*13)%len(recs)]); bad != "" {
					mu.Lock()
					wrong = append(wrong, bad)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("%d of 800 completions made at once were wrong; the first: %s", len(wrong), wrong[0])
	}
}

// keepingDB answers every request as DynamoDB answers a new record's, and
// keeps what it was sent, as a wrapper that logs requests might.
type keepingDB struct {
	API
	puts    []*dynamodb.PutItemInput
	updates []*dynamodb.UpdateItemInput
}

func (db *keepingDB) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	db.puts = append(db.puts, in)
	return &dynamodb.PutItemOutput{}, nil
}

func (db *keepingDB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	db.updates = append(db.updates, in)
	return &dynamodb.UpdateItemOutput{}, nil
}

// render writes out the values of m, sorted by name, through every
// pointer: what the SDK would send of them.
func render(m map[string]types.AttributeValue) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%s;", name, renderValue(m[name]))
	}
	return b.String()
}

func renderValue(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S:" + v.Value
	case *types.AttributeValueMemberN:
		return "N:" + v.Value
	case *types.AttributeValueMemberM:
		return "M{" + render(v.Value) + "}"
	case *types.AttributeValueMemberL:
		var b strings.Builder
		for _, e := range v.Value {
			b.WriteString(renderValue(e) + ",")
		}
		return "L[" + b.String() + "]"
	default:
		return fmt.Sprintf("%#v", v)
	}
}

// TestRequestsKeepTheirValuesAfterLaterRecords checks that a record's
// lock and completion keep their values while the store makes the
// requests of later records: the values of one request are made together
// (scalars), and no later request may reuse or change them. The values
// are the record's own: its key, lease, times as digits, result, message.
func TestRequestsKeepTheirValuesAfterLaterRecords(t *testing.T) {
	for _, layout := range []struct {
		name string
		opts func(*Options)
	}{{"partition key", nil}, {"sort key", func(o *Options) { o.SortKeyAttr, o.StaticPartitionKey = "sk", "idempotency#payments" }}} {
		t.Run(layout.name, func(t *testing.T) {
			o, err := newOptions([]func(*Options){layout.opts})
			if err != nil {
				t.Fatal(err)
			}
			db := &keepingDB{}
			s := newStore(db, "payments", o)
			ctx := t.Context()
			var want []string // each request as it was sent
			sent := func() []string {
				var got []string
				for i := range db.puts {
					got = append(got, render(db.puts[i].Item)+" | "+render(db.puts[i].ExpressionAttributeValues),
						render(db.updates[i].Key)+" | "+render(db.updates[i].ExpressionAttributeValues))
				}
				return got
			}
			for i := range 4 {
				id := "pay_" + strconv.Itoa(i)
				now := time.UnixMilli(1_800_000_000_000 + int64(i)*1001)
				rec := lambdakit.IdempotencyRecord{ID: id, Lease: "lease_" + id, Validation: "v_" + id,
					Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute)}
				if _, ok, err := s.Acquire(ctx, rec, now); err != nil || !ok {
					t.Fatalf("acquire %s: %v, %v", id, ok, err)
				}
				rec.Data = []byte("result of " + id)
				rec.Item = map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: strconv.Itoa(100 + i)}}
				rec.Staged = []any{RecordMessage{"body": str("charged " + id)}}
				if err := s.Complete(ctx, rec); err != nil {
					t.Fatalf("complete %s: %v", id, err)
				}
				got := sent()
				lock, done := got[len(got)-2], got[len(got)-1]
				for _, v := range []string{"S:" + id, "S:lease_" + id, "S:v_" + id, "N:" + strconv.FormatInt(now.Unix(), 10),
					"N:" + strconv.FormatInt(now.UnixMilli(), 10), "N:" + strconv.FormatInt(rec.Rounded().Expiration.Unix(), 10),
					"N:" + strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)} {
					if !strings.Contains(lock, v) {
						t.Errorf("the lock of %s does not hold %s: %s", id, v, lock)
					}
				}
				for _, v := range []string{"S:" + id, "S:lease_" + id, "S:result of " + id, "S:charged " + id, "N:" + strconv.Itoa(100+i)} {
					if !strings.Contains(done, v) {
						t.Errorf("the completion of %s does not hold %s: %s", id, v, done)
					}
				}
				want = append(want, lock, done)
			}
			if got := sent(); !slices.Equal(got, want) {
				t.Errorf("requests changed after they were sent:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestScalarsNumbersAreEachTheirOwn checks the digits numbers writes for
// the most numbers a request takes, the longest among them.
func TestScalarsNumbersAreEachTheirOwn(t *testing.T) {
	ns := []int64{math.MinInt64, 0, math.MaxInt64, -7}
	v := new(scalars)
	var got []types.AttributeValue
	for _, n := range ns {
		got = append(got, v.num(n))
	}
	v.numbers()
	for i, n := range ns {
		if g := got[i].(*types.AttributeValueMemberN).Value; g != strconv.FormatInt(n, 10) {
			t.Errorf("number %d is %q; want %d", i, g, n)
		}
	}
}
