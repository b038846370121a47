package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// What each mode costs on DynamoDB (moto), counted at the client: the
// record on the business item takes 2 requests per new message, the
// one-request path 1, a warm duplicate none; a duplicate that loses the
// race costs one failed conditional write and applies nothing.

// paymentOnItem is a handler of a payment that lives on its record's item: it
// declares the item, and stages a ledger row when ledger is set.
func paymentOnItem(runs *atomic.Int32, table string, ledger bool) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		n := runs.Add(1)
		if err := dynamostore.SetItem(ctx, map[string]types.AttributeValue{
			"customer": &types.AttributeValueMemberS{Value: "cus_1"},
			"amount":   &types.AttributeValueMemberN{Value: "1250"},
			"run":      &types.AttributeValueMemberN{Value: strconv.Itoa(int(n))},
		}); err != nil {
			return nil, err
		}
		if ledger {
			id, _ := lambdakit.StagingRecord(ctx)
			if err := dynamostore.Stage(ctx, ledgerRow(table, id+"#ledger#"+strconv.Itoa(int(n)))); err != nil {
				return nil, err
			}
		}
		return []byte(fmt.Sprintf(`{"run":%d}`, n)), nil
	}
}

// ledgerRow is a staged Put of a new item id in table.
func ledgerRow(table, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName:           aws.String(table),
		Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	}}
}

func onItem(stagedOnly bool) func(*lambdakit.Options) {
	return func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.TTL, o.StagedOnly = "payment", true, lambdakit.NeverExpire, stagedOnly
		o.CacheSize = 10
		o.Logger = discardLogger()
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestModeRequestsPerMessage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stagedOnly bool
		ledger     bool
		first      map[string]int // a new message
		cold       map[string]int // its duplicate in a container that has not seen it
	}{
		{"record on the item", false, false, map[string]int{"PutItem": 1, "UpdateItem": 1}, map[string]int{"PutItem": 1}},
		{"record on the item, with a ledger row", false, true, map[string]int{"PutItem": 1, "TransactWriteItems": 1}, map[string]int{"PutItem": 1}},
		{"StagedOnly", true, false, map[string]int{"PutItem": 1}, map[string]int{"PutItem": 1}},
		{"StagedOnly, with a ledger row", true, true, map[string]int{"TransactWriteItems": 1}, map[string]int{"TransactWriteItems": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			var runs atomic.Int32
			fn := paymentOnItem(&runs, f.table, tc.ledger)
			e := lambdakit.NewOnce(f.store, onItem(tc.stagedOnly))
			got, err := e.Do(testCtx(t), "pay_123", []byte(`{"amount":1250}`), fn)
			if err != nil || string(got) != `{"run":1}` {
				t.Fatalf("got %s, %v", got, err)
			}
			f.checkCalls(t, tc.first)
			item := f.item(t, f.table, "id", "payment#pay_123")
			if str(t, item, "status") != "COMPLETED" || str(t, item, "customer") != "cus_1" || num(t, item, "amount") != "1250" || str(t, item, "data") != `{"run":1}` {
				t.Errorf("item = %v; want the payment, completed, with its result", item)
			}
			if _, ok := item["expiration"]; ok {
				t.Errorf("item has an expiration; want none (NeverExpire)")
			}

			f.calls.Reset()
			if got, err := e.Do(testCtx(t), "pay_123", []byte(`{"amount":1250}`), fn); err != nil || string(got) != `{"run":1}` {
				t.Fatalf("warm duplicate: got %s, %v", got, err)
			}
			f.checkCalls(t, map[string]int{})

			f.calls.Reset()
			cold := lambdakit.NewOnce(f.store, onItem(tc.stagedOnly))
			if got, err := cold.Do(testCtx(t), "pay_123", []byte(`{"amount":1250}`), fn); err != nil || string(got) != `{"run":1}` {
				t.Fatalf("cold duplicate: got %s, %v", got, err)
			}
			f.checkCalls(t, tc.cold)
			if item := f.item(t, f.table, "id", "payment#pay_123"); num(t, item, "run") != "1" {
				t.Errorf("after the duplicate, run = %s; want 1: its writes must not land", num(t, item, "run"))
			}
			if tc.ledger && f.item(t, f.table, "id", "payment#pay_123#ledger#2") != nil {
				t.Error("the duplicate's ledger row was written")
			}
			if _, err := cold.Do(testCtx(t), "pay_123", []byte(`{"amount":9999}`), fn); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
				t.Errorf("another payload: got %v; want ErrPayloadMismatch", err)
			}
		})
	}
}

// Two and ten containers get the same message at once: one commit lands,
// every call answers with its result, each losing StagedOnly run costs one
// failed conditional write, and the ledger holds one row.
func TestStagedOnlyConcurrentDuplicates(t *testing.T) {
	for _, n := range []int{2, 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			f := setup(t)
			var runs atomic.Int32
			fn := paymentOnItem(&runs, f.table, true)
			var wg sync.WaitGroup
			results := make([]string, n)
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := lambdakit.NewOnce(f.store, onItem(true)).Do(testCtx(t), "pay_race", []byte(`{}`), fn)
					results[i], errs[i] = string(out), err
				}()
			}
			wg.Wait()
			t.Logf("%d runs, requests %v", runs.Load(), f.calls.Counts())
			item := f.item(t, f.table, "id", "payment#pay_race")
			want := str(t, item, "data")
			for i := range n {
				if errs[i] != nil || results[i] != want {
					t.Errorf("call %d: got %s, %v; want %s", i, results[i], errs[i], want)
				}
			}
			if got := f.calls.Count("TransactWriteItems"); got != int(runs.Load()) || f.calls.Total() != got {
				t.Errorf("requests %v for %d runs; want one TransactWriteItems per run", f.calls.Counts(), runs.Load())
			}
			rows := 0
			for r := 1; r <= int(runs.Load()); r++ {
				if f.item(t, f.table, "id", "payment#pay_race#ledger#"+strconv.Itoa(r)) != nil {
					rows++
				}
			}
			if rows != 1 {
				t.Errorf("%d ledger rows; want 1", rows)
			}
		})
	}
}

func TestStagedOnlyFailures(t *testing.T) {
	t.Run("a staged condition that fails is the handler's failure", func(t *testing.T) {
		f := setup(t)
		putRaw(t, f, map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "taken"}})
		e := lambdakit.NewOnce(f.store, onItem(true))
		_, err := e.Do(testCtx(t), "pay_cond", nil, func(ctx context.Context) ([]byte, error) {
			return nil, dynamostore.Stage(ctx, ledgerRow(f.table, "taken"))
		})
		var staged *dynamostore.StagedWriteError
		if !errors.As(err, &staged) || staged.Code != "ConditionalCheckFailed" || errors.Is(err, lambdakit.ErrPermanent) {
			t.Fatalf("got %v; want a *StagedWriteError for ConditionalCheckFailed, not permanent", err)
		}
		if f.item(t, f.table, "id", "payment#pay_cond") != nil {
			t.Error("the record was written; want nothing")
		}
	})
	t.Run("work in progress under a two-step lock", func(t *testing.T) {
		f := setup(t)
		at := time.Now()
		f.mustAcquire(t, record("payment#pay_busy", at), at)
		ran := false
		_, err := lambdakit.NewOnce(f.store, onItem(true)).Do(testCtx(t), "pay_busy", nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
		if !errors.Is(err, lambdakit.ErrInProgress) || !ran {
			t.Errorf("got %v (ran %v); want ErrInProgress after the run", err, ran)
		}
	})
	t.Run("the record is one of a transaction's 100 writes", func(t *testing.T) {
		f := setup(t)
		e := lambdakit.NewOnce(f.store, onItem(true))
		stage := func(n int) func(context.Context) ([]byte, error) {
			return func(ctx context.Context) ([]byte, error) {
				id, _ := lambdakit.StagingRecord(ctx)
				for i := range n {
					if err := dynamostore.Stage(ctx, ledgerRow(f.table, fmt.Sprintf("%s#%d", id, i))); err != nil {
						return nil, err
					}
				}
				return nil, nil
			}
		}
		if _, err := e.Do(testCtx(t), "pay_99", nil, stage(99)); err != nil {
			t.Fatalf("99 staged writes and the record: %v", err)
		}
		f.checkCalls(t, map[string]int{"TransactWriteItems": 1})
		f.calls.Reset()
		_, err := e.Do(testCtx(t), "pay_100", nil, stage(100))
		if !errors.Is(err, lambdakit.ErrStagingUnsupported) || !errors.Is(err, lambdakit.ErrPermanent) {
			t.Errorf("100 staged writes and the record: got %v; want ErrStagingUnsupported, permanent", err)
		}
		f.checkCalls(t, map[string]int{})
	})
}

// A lapsed lease on a record that lives on the business item: the new
// owner takes it over, the old one can neither complete it (its item is
// not written) nor release it.
func TestRecordOnItemLapsedLeaseIsFenced(t *testing.T) {
	f := setup(t)
	at := now()
	old := record("payment#pay_lapsed", at)
	old.InProgressExpiration = at.Add(time.Second)
	f.mustAcquire(t, old, at)
	owner := record("payment#pay_lapsed", at)
	f.mustAcquire(t, owner, at.Add(2*time.Second))

	stale := old
	stale.Status = lambdakit.StatusCompleted
	stale.Item = map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "1"}}
	if err := f.store.Complete(t.Context(), stale); !errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("stale Complete: got %v; want ErrLeaseLost", err)
	}
	if err := f.store.Release(t.Context(), old.ID, old.Lease); !errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("stale Release: got %v; want ErrLeaseLost", err)
	}
	done := owner
	done.Status = lambdakit.StatusCompleted
	done.Item = map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "2"}}
	f.mustComplete(t, done)
	if item := f.item(t, f.table, "id", old.ID); num(t, item, "amount") != "2" || str(t, item, "lease") != owner.Lease {
		t.Errorf("item = %v; want the new owner's", item)
	}
}

// An item that names a record's attribute is refused at SetItem, as the
// store's Options name them: by CheckItem, and by SetItem, which leaves
// that check to the staging check (CheckStaging), permanently, since no
// delivery can write that item.
func TestSetItemRefusesTheRecordsAttributes(t *testing.T) {
	f := setup(t, func(o *dynamostore.Options) { o.KeyAttr = "pk" })
	e := lambdakit.NewOnce(f.store, twoStepOnItem)
	for _, name := range []string{"pk", "status", "expiration", "in_progress_expiration", "validation", "data", "lease", "failure"} {
		item := map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "1"}, name: &types.AttributeValueMemberS{Value: "x"}}
		if err := f.store.CheckItem(item); !errors.Is(err, lambdakit.ErrInvalidItem) {
			t.Errorf("CheckItem of %q: got %v; want ErrInvalidItem", name, err)
		}
		var setErr error
		_, _ = e.Do(testCtx(t), "pay_own_"+name, []byte(`{}`), func(ctx context.Context) ([]byte, error) {
			setErr = dynamostore.SetItem(ctx, item)
			return nil, setErr
		})
		if !errors.Is(setErr, lambdakit.ErrInvalidItem) || !lambdakit.IsPermanent(setErr) || !strings.Contains(setErr.Error(), strconv.Quote(name)) {
			t.Errorf("SetItem of %q: got %v; want a permanent ErrInvalidItem naming it", name, setErr)
		}
	}
	if err := f.store.CheckItem(map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}); err != nil {
		t.Errorf(`"id", not the key here: got %v; want accepted`, err)
	}
	if err := f.store.CheckItem(map[string]any{"a": 1}); !errors.Is(err, lambdakit.ErrInvalidItem) {
		t.Errorf("another type: got %v; want ErrInvalidItem", err)
	}
}

// lambdakit.SetItem given no item at all (a nil interface, where
// dynamostore.SetItem's nil map is a map with no attributes) is refused
// as CheckItem refuses it, not taken as the handler's item: the record
// would complete without one, and a SetItem of the real item would fail
// with ErrItemAlreadySet.
func TestSetItemRefusesANilItem(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, twoStepOnItem)
	var setErr error
	_, _ = e.Do(testCtx(t), "pay_nil_item", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		setErr = lambdakit.SetItem(ctx, nil)
		return nil, setErr
	})
	if !errors.Is(setErr, lambdakit.ErrInvalidItem) {
		t.Errorf("SetItem of nil: got %v; want ErrInvalidItem", setErr)
	}
	if err := f.store.CheckItem(nil); !errors.Is(err, lambdakit.ErrInvalidItem) {
		t.Errorf("CheckItem of nil: got %v; want ErrInvalidItem", err)
	}
}

// A business item that other code wrote under a record's key, with a
// status of its own (CANCELLED) and an expiration in the past, is no
// expired record: neither the two-step lock nor StagedOnly's commit
// replaces it, whatever the store names its status and expiration
// attributes, and the message fails with a *NotARecordError, the item
// whole.
func TestBusinessItemWithAStatusOfItsOwnIsNeverTakenOver(t *testing.T) {
	for _, attrs := range []struct{ status, expiration string }{{"status", "expiration"}, {"state", "ttl"}} {
		for _, stagedOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/StagedOnly=%v", attrs.status, attrs.expiration, stagedOnly), func(t *testing.T) {
				f := setup(t, func(o *dynamostore.Options) { o.StatusAttr, o.ExpirationAttr = attrs.status, attrs.expiration })
				id := "payment#pay_cancelled"
				item := map[string]types.AttributeValue{
					"id":             &types.AttributeValueMemberS{Value: id},
					attrs.status:     &types.AttributeValueMemberS{Value: "CANCELLED"},
					attrs.expiration: &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)},
					"customer":       &types.AttributeValueMemberS{Value: "cus_9"},
					"amount":         &types.AttributeValueMemberN{Value: "700"},
				}
				putRaw(t, f, item)
				var runs atomic.Int32
				_, err := lambdakit.NewOnce(f.store, onItem(stagedOnly)).Do(testCtx(t), "pay_cancelled", nil, paymentOnItem(&runs, f.table, false))
				var nar *lambdakit.NotARecordError
				if !errors.As(err, &nar) || nar.ID != id || nar.Status != "CANCELLED" {
					t.Errorf("Do = %v; want a *NotARecordError for %s with status CANCELLED", err, id)
				}
				if n := runs.Load(); n != 0 && !stagedOnly {
					t.Errorf("the handler ran %d times; want none", n)
				}
				if got := f.item(t, f.table, "id", id); !reflect.DeepEqual(got, item) {
					t.Errorf("item = %v; want it as other code wrote it, %v", got, item)
				}
			})
		}
	}
}

// SetItem refuses a number DynamoDB cannot hold (awsrules.CheckNumber,
// table-tested clause by clause there), before the work goes on, rather
// than a completion DynamoDB refuses after it.
func TestSetItemRefusesNumbersDynamoDBRefuses(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, twoStepOnItem)
	for _, n := range []string{"1e200", "1e-200", "1" + strings.Repeat("0", 37) + "1", "1E+126"} {
		var setErr error
		_, _ = e.Do(testCtx(t), "pay_num_"+n, []byte(`{}`), func(ctx context.Context) ([]byte, error) {
			setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: n}})
			return nil, setErr
		})
		if !errors.Is(setErr, lambdakit.ErrInvalidItem) || !errors.Is(setErr, awsrules.ErrNumber) {
			t.Errorf("SetItem of the number %s: got %v; want ErrInvalidItem wrapping awsrules.ErrNumber", n, setErr)
		}
	}
}

// SetItem refuses an item that, on the record's item, would be over
// DynamoDB's 400 KB, before the work goes on.
func TestSetItemRefusesAnItemOverDynamoDBsItemLimit(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, twoStepOnItem)
	var setErr error
	_, _ = e.Do(testCtx(t), "pay_large", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"receipt": &types.AttributeValueMemberS{Value: strings.Repeat("r", awsrules.MaxItemBytes)}})
		return nil, setErr
	})
	if !errors.Is(setErr, lambdakit.ErrInvalidItem) || !errors.Is(setErr, lambdakit.ErrStagedTooLarge) {
		t.Errorf("SetItem of a 400 KiB attribute: got %v; want ErrInvalidItem wrapping ErrStagedTooLarge", setErr)
	}
}

// SetItem counts a string that is not UTF-8 at the size DynamoDB
// receives: the SDK sends each byte that is not UTF-8 as U+FFFD, three
// bytes. 140,000 such bytes are 420,000 bytes in DynamoDB, over its
// 400 KB (and moto's 405,000): SetItem must refuse them before the work,
// not leave the completion to be refused after it.
func TestSetItemCountsBytesThatAreNotUTF8AsDynamoDBReceivesThem(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, onItem(false))
	var setErr error
	effects := 0
	_, err := e.Do(testCtx(t), "pay_latin1", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"receipt": &types.AttributeValueMemberS{Value: strings.Repeat("\xff", 140_000)}})
		if setErr != nil {
			return nil, setErr
		}
		effects++ // the card is charged
		return nil, nil
	})
	if effects > 0 && err != nil {
		t.Fatalf("SetItem: %v; then, after the work, Do: %v; want SetItem to refuse the item (ErrStagedTooLarge) before it", setErr, err)
	}
	if !errors.Is(setErr, lambdakit.ErrStagedTooLarge) {
		t.Errorf("SetItem of 140,000 bytes that are not UTF-8: %v; want ErrInvalidItem wrapping ErrStagedTooLarge", setErr)
	}
}

// SetItem refuses an attribute name that is not UTF-8: the SDK sends each
// such byte as U+FFFD, so "a\xff" and "a\xfe" are one name in DynamoDB,
// which refuses the completion that sets it twice ("Two document paths
// overlap"), after the work; or, alone, the item is written under a name
// the handler did not give. Nested map keys are names too.
func TestSetItemRefusesNamesThatAreNotUTF8(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, onItem(false))
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	for i, item := range []map[string]types.AttributeValue{
		{"a\xff": s("1"), "a\xfe": s("2")},
		{"card": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a\xff": s("1"), "a\xfe": s("2")}}},
	} {
		var setErr error
		effects := 0
		_, err := e.Do(testCtx(t), fmt.Sprint("pay_names_", i), []byte(`{}`), func(ctx context.Context) ([]byte, error) {
			if setErr = dynamostore.SetItem(ctx, item); setErr != nil {
				return nil, setErr
			}
			effects++ // the card is charged
			return nil, nil
		})
		if effects > 0 && err != nil {
			t.Errorf("item %d: SetItem: %v; then, after the work, Do: %v; want SetItem to refuse the names before it", i, setErr, err)
		}
		if !errors.Is(setErr, lambdakit.ErrInvalidItem) {
			t.Errorf("item %d: SetItem of names that are not UTF-8: %v; want ErrInvalidItem", i, setErr)
		}
	}
}

// SetItem refuses an attribute name of 64 KB or more, which DynamoDB
// refuses ("Attribute names must be at least one character long and less
// than 64 KB"), and takes one a byte shorter. moto takes any length: the
// test holds SetItem to the documented rule.
func TestSetItemRefusesANameOf64KB(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, onItem(false))
	for _, c := range []struct {
		size   int
		refuse bool
	}{{64 * 1024, true}, {64*1024 - 1, false}} {
		var setErr error
		_, err := e.Do(testCtx(t), fmt.Sprint("pay_name_", c.size), []byte(`{}`), func(ctx context.Context) ([]byte, error) {
			setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{strings.Repeat("n", c.size): &types.AttributeValueMemberS{Value: "1"}})
			return nil, setErr
		})
		if refused := errors.Is(setErr, lambdakit.ErrInvalidItem); refused != c.refuse {
			t.Errorf("SetItem of a name of %d bytes: %v (Do: %v); want refused %v", c.size, setErr, err, c.refuse)
		}
		if !c.refuse && err != nil {
			t.Errorf("Do with a name of %d bytes: %v; want it completed", c.size, err)
		}
	}
}

// SetItem refuses a number set that holds one value twice, spelled two
// ways ("1" and "1.0"): DynamoDB compares a number set's members as
// numbers and refuses the completion after the work. moto compares them
// as strings and takes it, so the test asks SetItem (the rule is
// table-tested in awsrules).
func TestSetItemRefusesANumberSetWithOneValueTwice(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, onItem(false))
	var setErr error
	_, _ = e.Do(testCtx(t), "pay_ns", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amounts": &types.AttributeValueMemberNS{Value: []string{"1", "1.0"}}})
		return nil, setErr
	})
	if !errors.Is(setErr, lambdakit.ErrInvalidItem) {
		t.Errorf("SetItem of the number set [1 1.0]: %v; want ErrInvalidItem", setErr)
	}
}

// twoStepOnItem is the record on the business item, with its lock: the
// mode of the payments sample, whose handler charges (an external
// effect) before it declares the item.
func twoStepOnItem(o *lambdakit.Options) {
	o.Prefix, o.ReadableIDs, o.TTL = "payment", true, lambdakit.NeverExpire
	o.Logger = discardLogger()
}

// A value nested in the handler's item that is nil passes CheckItem
// (which looks at the top level only), and the SDK then sends a request
// DynamoDB cannot read. That failure is not ErrCompletionRejected, so the
// engine releases the key after the work was done: every delivery charges
// again, without end.
func TestSetItemRefusesANestedNil(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, twoStepOnItem)
	var charges atomic.Int32
	var setErr error
	charge := func(ctx context.Context) ([]byte, error) {
		charges.Add(1) // the external effect, under the lock
		setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{
			"amount": &types.AttributeValueMemberN{Value: "1250"},
			"card":   &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"last4": nil}},
		})
		return nil, setErr
	}
	var errs []error
	for range 2 { // the message, then its redelivery
		_, err := e.Do(testCtx(t), "pay_nil", []byte(`{}`), charge)
		errs = append(errs, err)
	}
	t.Logf("SetItem: %v; deliveries: %v", setErr, errs)
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times over two deliveries; want once (SetItem should refuse a nested nil with ErrInvalidItem, or the completion should be rejected for good)", n)
	}
}

// An empty set (or a number that is no number, or a set with duplicates)
// passes SetItem; DynamoDB refuses the completion only after the work
// ran. The payment is charged, and its item is never written: the record
// is completed with a failure, and the message dead-lettered.
func TestSetItemRefusesAnEmptySetBeforeTheWork(t *testing.T) {
	for name, v := range map[string]types.AttributeValue{
		"empty string set": &types.AttributeValueMemberSS{Value: []string{}},
		"empty number set": &types.AttributeValueMemberNS{Value: []string{}},
		"nested empty set": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"tags": &types.AttributeValueMemberSS{}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := setup(t)
			e := lambdakit.NewOnce(f.store, twoStepOnItem)
			charged := false
			var setErr error
			_, err := e.Do(testCtx(t), "pay_set", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
				setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{
					"amount": &types.AttributeValueMemberN{Value: "1250"},
					"tags":   v,
				})
				if setErr != nil {
					return nil, setErr
				}
				charged = true // the charge, once the item is declared
				return nil, nil
			})
			if !errors.Is(setErr, lambdakit.ErrInvalidItem) {
				item := f.record(t, "payment#pay_set")
				t.Errorf("SetItem accepted an item DynamoDB refuses (charged %v; Do: %v; item %v); want ErrInvalidItem before the work",
					charged, err, item)
			}
		})
	}
}

// Values DynamoDB refuses with the write, or the SDK cannot send, are
// refused by SetItem before the work, here or nested, not met by the
// completion after the charge (the item then never written):
//   - a nil member (a nil *AttributeValueMemberS panics in the encoder)
//     and a types.UnknownUnionMember (no encoding);
//   - a NULL that is not true, the zero AttributeValueMemberNULL ("Null
//     attribute value types must have the value of true"; moto refuses it
//     in a PutItem's item, as StagedOnly's commit sends it, but takes it
//     among an UpdateItem's values, as the two-step completion does);
//   - a list or map nested past DynamoDB's 32 levels, the attribute the
//     first: 31 maps one inside the other around a string are taken, 32
//     refused (moto takes any depth: the limit is DynamoDB's quotas');
//   - a binary whose Value is nil, alone or in a binary set: the SDK sends
//     it as a JSON null, an AttributeValue with no type to DynamoDB
//     ("Supplied AttributeValue is empty"; moto answers a 500, retried);
//     an empty binary that is not nil is sent as "" and taken.
//
// What is taken is written.
func TestSetItemRefusesValuesDynamoDBRefusesAfterTheWork(t *testing.T) {
	nested := func(levels int, list bool) types.AttributeValue {
		var v types.AttributeValue = &types.AttributeValueMemberS{Value: "leaf"}
		for range levels {
			if list {
				v = &types.AttributeValueMemberL{Value: []types.AttributeValue{v}}
			} else {
				v = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"n": v}}
			}
		}
		return v
	}
	var nilString *types.AttributeValueMemberS
	for _, c := range []struct {
		name   string
		v      types.AttributeValue
		refuse bool
	}{
		{"a nil string member", nilString, true},
		{"a nil string member nested", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": nilString}}, true},
		{"an unknown union member", &types.UnknownUnionMember{Tag: "X", Value: []byte("1")}, true},
		{"NULL false", &types.AttributeValueMemberNULL{}, true},
		{"NULL false nested", &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberNULL{}}}, true},
		{"NULL true", &types.AttributeValueMemberNULL{Value: true}, false},
		{"31 maps", nested(31, false), false},
		{"32 maps", nested(32, false), true},
		{"32 lists", nested(32, true), true},
		{"31 lists in a map", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"l": nested(31, true)}}, true},
		{"a nil binary", &types.AttributeValueMemberB{}, true},
		{"a nil binary in a set", &types.AttributeValueMemberBS{Value: [][]byte{[]byte("a"), nil}}, true},
		{"empty binaries", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"b": &types.AttributeValueMemberB{Value: []byte{}}, "bs": &types.AttributeValueMemberBS{Value: [][]byte{{}}}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			e := lambdakit.NewOnce(f.store, twoStepOnItem)
			charged := false
			var setErr error
			_, err := e.Do(testCtx(t), "pay_value", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
				if setErr = dynamostore.SetItem(ctx, map[string]types.AttributeValue{"amount": &types.AttributeValueMemberN{Value: "1"}, "v": c.v}); setErr != nil {
					return nil, setErr
				}
				charged = true // the charge, once the item is declared
				return nil, nil
			})
			if refused := errors.Is(setErr, lambdakit.ErrInvalidItem); refused != c.refuse {
				t.Fatalf("SetItem: %v (charged %v, Do: %v); want refused %v", setErr, charged, err, c.refuse)
			}
			if !c.refuse && (err != nil || f.record(t, "payment#pay_value") == nil) {
				t.Errorf("Do: %v; want the item completed and written", err)
			}
		})
	}
}

// expressionSizes records the length of every UpdateItem's
// UpdateExpression the client sends.
type expressionSizes struct{ sizes []int }

func (x *expressionSizes) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("expressionSize",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok {
				x.sizes = append(x.sizes, len(aws.ToString(u.UpdateExpression)))
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// DynamoDB refuses any expression string over 4 KB ("The maximum length
// of any expression string is 4 KB"). The completion that writes the
// handler's item spells one placeholder pair per attribute in its
// UpdateExpression: an item of 300 small attributes (3 KB, well within
// the 400 KB SetItem documents) makes an UpdateExpression over 4 KB,
// which DynamoDB refuses after the work ran (moto does not check the
// limit, so this test reads the request). StagedOnly's PutItem has no
// such limit; the two-step completion could write the item the same way
// (a Put conditioned on the lease) or SetItem could refuse what the
// completion cannot express.
func TestSetItemCompletionFitsTheExpressionLimit(t *testing.T) {
	db := local(t)
	table := db.NewTable(t)
	var x expressionSizes
	store := newStore(t, db.Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, x.option) }), table)
	e := lambdakit.NewOnce(store, twoStepOnItem)
	attrs := map[string]types.AttributeValue{}
	for i := range 300 {
		attrs[fmt.Sprintf("line_%03d", i)] = &types.AttributeValueMemberN{Value: strconv.Itoa(i)}
	}
	_, err := e.Do(testCtx(t), "pay_wide", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		return nil, dynamostore.SetItem(ctx, attrs)
	})
	// moto itself fails such an update (a RecursionError in its parser
	// from about 200 SET clauses, a 500 the engine takes for transient:
	// the key is released and the work runs again).
	t.Logf("Do: %v", err)
	if errors.Is(err, lambdakit.ErrInvalidItem) && len(x.sizes) == 0 {
		return // refused by SetItem, before any request: fixed so
	}
	if len(x.sizes) == 0 {
		t.Fatal("no UpdateItem sent")
	}
	for _, n := range x.sizes {
		if n > 4096 {
			t.Errorf("the completion's UpdateExpression is %d bytes, over DynamoDB's 4 KB limit: DynamoDB would refuse it after the charge", n)
		}
	}
}

// A business item that other code wrote under the record's key, with a
// business status "COMPLETED" (an order's status, say), is no record: it
// has neither a lease (every lambdakit record has one) nor an expiration
// (every Powertools record has one). The engine takes it for a completed
// record all the same: the message is answered as a duplicate and its
// work is never done, in either mode.
func TestBusinessItemWithStatusCompletedIsNoRecord(t *testing.T) {
	for _, stagedOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("StagedOnly=%v", stagedOnly), func(t *testing.T) {
			f := setup(t)
			putRaw(t, f, map[string]types.AttributeValue{
				"id":     &types.AttributeValueMemberS{Value: "order#ord_1"},
				"status": &types.AttributeValueMemberS{Value: "COMPLETED"},
				"total":  &types.AttributeValueMemberN{Value: "42"},
			})
			e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) {
				o.Prefix, o.ReadableIDs, o.TTL, o.StagedOnly = "order", true, lambdakit.NeverExpire, stagedOnly
				o.Logger = discardLogger()
			})
			ran := false
			out, err := e.Do(testCtx(t), "ord_1", []byte(`{"order_id":"ord_1"}`), func(ctx context.Context) ([]byte, error) {
				ran = true
				return []byte(`"shipped"`), dynamostore.SetItem(ctx, map[string]types.AttributeValue{"shipment": &types.AttributeValueMemberS{Value: "shp_1"}})
			})
			if err == nil {
				t.Errorf("Do: got %q, nil (handler ran: %v; item now %v); want an error: the item under order#ord_1 is no idempotency record, and its work was not done",
					out, ran, f.record(t, "order#ord_1"))
			}
		})
	}
}

// A business item that other code wrote under the record's key, with an
// attribute of its own named "expiration" (when a subscription ends, in
// epoch seconds) that has passed, and no status: the lock's condition
// takes it for an expired record, and its PutItem replaces the whole
// item. The subscription's other attributes are gone, and if the handler
// fails the release deletes what is left. With NeverExpire the table
// need not have a TTL at all, so nothing else would ever have removed
// the item.
func TestBusinessItemWithPastExpirationIsLeftAlone(t *testing.T) {
	for _, stagedOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("StagedOnly=%v", stagedOnly), func(t *testing.T) {
			f := setup(t)
			putRaw(t, f, map[string]types.AttributeValue{
				"id":         &types.AttributeValueMemberS{Value: "sub#sub_1"},
				"expiration": &types.AttributeValueMemberN{Value: "1700000000"}, // ended in 2023
				"plan":       &types.AttributeValueMemberS{Value: "gold"},
			})
			e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) {
				o.Prefix, o.ReadableIDs, o.TTL, o.StagedOnly = "sub", true, lambdakit.NeverExpire, stagedOnly
				o.Logger = discardLogger()
			})
			_, err := e.Do(testCtx(t), "sub_1", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
				return nil, dynamostore.SetItem(ctx, map[string]types.AttributeValue{"renewed": &types.AttributeValueMemberBOOL{Value: true}})
			})
			if item := f.record(t, "sub#sub_1"); item["plan"] == nil {
				t.Errorf("Do: %v; the item under sub#sub_1, no idempotency record (no status), was replaced: %v; want it left alone and the call refused", err, item)
			}
		})
	}
}
