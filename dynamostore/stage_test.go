package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// payment is a write a payment handler would stage: the payment item, put
// only if it does not exist yet.
func payment(table, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			"id":     &types.AttributeValueMemberS{Value: id},
			"amount": &types.AttributeValueMemberN{Value: "42"},
		},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	}}
}

func TestCompleteStaged(t *testing.T) {
	t.Run("commits the staged writes with the completion in one transaction", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#staged", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()

		rec.Data = []byte(`{"payment":"pay-1"}`)
		rec.Staged = []any{payment(f.table, "payment#1"), payment(f.table, "payment#2")}
		f.mustComplete(t, rec)
		f.checkCalls(t, map[string]int{"TransactWriteItems": 1})

		item := f.record(t, rec.ID)
		if got := str(t, item, "status"); got != "COMPLETED" {
			t.Errorf("status = %q; want COMPLETED", got)
		}
		if got := str(t, item, "data"); got != string(rec.Data) {
			t.Errorf("data = %q; want %q", got, rec.Data)
		}
		for _, id := range []string{"payment#1", "payment#2"} {
			if f.record(t, id) == nil {
				t.Errorf("staged item %s absent; want it committed", id)
			}
		}
	})

	// DynamoDB refuses a transaction over 4 MB on every attempt (moto
	// does not: the store says so before sending it, so the test holds
	// for AWS's documented limit).
	t.Run("staged writes over a transaction's 4 MB are rejected before any request", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#huge", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		for i := range 11 {
			rec.Staged = append(rec.Staged, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
				"id":   &types.AttributeValueMemberS{Value: fmt.Sprintf("big#%d", i)},
				"blob": &types.AttributeValueMemberS{Value: strings.Repeat("b", 390_000)},
			}}})
		}
		err := f.store.Complete(t.Context(), rec)
		if !errors.Is(err, lambdakit.ErrCompletionRejected) {
			t.Fatalf("Complete of 11 x 390 KB staged writes: %v; want ErrCompletionRejected", err)
		}
		f.checkCalls(t, map[string]int{})
		if got := dynamostore.WriteSize(rec.Staged[0].(types.TransactWriteItem)); got < 390_000 || got > 390_100 {
			t.Errorf("WriteSize of a 390 KB put = %d; want its item's size", got)
		}
	})

	// The messages staged on the record (RecordMessage) go on the record's
	// own item: with them it passes DynamoDB's 400 KB, which it refuses on
	// every attempt. The store counts them before sending the transaction,
	// whoever called it (a store wrapper that hides CheckStaging leaves
	// this the only check), for the completion and for StagedOnly's
	// commit. No result, so that only the transaction's own check can
	// tell.
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("messages on the record over an item's 400 KB are rejected before any request/Commit=%v", commit), func(t *testing.T) {
			f := setup(t)
			t0 := now()
			rec := record("fn#messages", t0)
			if !commit {
				f.mustAcquire(t, rec, t0)
			}
			f.calls.Reset()
			rec.Staged = []any{
				dynamostore.RecordMessage{"body": &types.AttributeValueMemberS{Value: strings.Repeat("m", 400<<10)}},
				payment(f.table, "payment#with-messages"),
			}
			var err error
			if commit {
				rec.Status = lambdakit.StatusCompleted
				_, _, err = f.store.Commit(t.Context(), rec, t0)
			} else {
				err = f.store.Complete(t.Context(), rec)
			}
			if !errors.Is(err, lambdakit.ErrCompletionRejected) || !errors.Is(err, lambdakit.ErrStagedTooLarge) {
				t.Errorf("400 KiB of messages on the record: %v; want ErrCompletionRejected wrapping ErrStagedTooLarge", err)
			}
			f.checkCalls(t, map[string]int{})
		})
	}

	t.Run("staged write whose condition fails commits nothing", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		putRaw(t, f, map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "payment#taken"}})
		rec := record("fn#conflict", t0)
		f.mustAcquire(t, rec, t0)

		rec.Data = []byte(`"paid"`)
		rec.Staged = []any{payment(f.table, "payment#fresh"), payment(f.table, "payment#taken")}
		err := f.store.Complete(t.Context(), rec)
		if err == nil {
			t.Fatal("Complete: no error; want the transaction cancelled")
		}
		if errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("Complete: error %v is ErrLeaseLost; want a staged write error", err)
		}
		var staged *dynamostore.StagedWriteError
		if !errors.As(err, &staged) {
			t.Fatalf("Complete: error %v; want a *StagedWriteError", err)
		}
		if staged.Index != 1 || staged.Code != "ConditionalCheckFailed" {
			t.Errorf("StagedWriteError{Index:%d Code:%q}; want {Index:1 Code:%q}", staged.Index, staged.Code, "ConditionalCheckFailed")
		}
		var canceled *types.TransactionCanceledException
		if !errors.As(err, &canceled) {
			t.Errorf("Complete: error %v; want it to wrap the *types.TransactionCanceledException", err)
		}

		item := f.record(t, rec.ID)
		if got := str(t, item, "status"); got != "INPROGRESS" {
			t.Errorf("status = %q; want INPROGRESS (completion rolled back)", got)
		}
		if item := f.record(t, "payment#fresh"); item != nil {
			t.Errorf("staged item payment#fresh = %v; want it absent (rolled back)", item)
		}
	})

	t.Run("stale lease loses the lease and commits nothing", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		stale := record("fn#stalestaged", t0)
		f.mustAcquire(t, stale, t0)
		at := stale.InProgressExpiration.Add(time.Second)
		f.mustAcquire(t, record(stale.ID, at), at)

		stale.Staged = []any{payment(f.table, "payment#late")}
		if err := f.store.Complete(t.Context(), stale); !errors.Is(err, lambdakit.ErrLeaseLost) {
			t.Errorf("stale Complete: error %v; want ErrLeaseLost", err)
		}
		if item := f.record(t, "payment#late"); item != nil {
			t.Errorf("staged item = %v; want it absent", item)
		}
	})

	t.Run("write of another type is refused without a request", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#wrongtype", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		w := payment(f.table, "payment#ptr")
		rec.Staged = []any{payment(f.table, "payment#ok"), &w}
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrStagingUnsupported) {
			t.Errorf("Complete: error %v; want ErrStagingUnsupported", err)
		}
		f.checkCalls(t, map[string]int{})
	})

	t.Run("more writes than a transaction holds are refused without a request", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#toomany", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		for i := range 100 { // 100 staged + the completion = 101
			rec.Staged = append(rec.Staged, payment(f.table, "payment#"+strconv.Itoa(i)))
		}
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrStagingUnsupported) {
			t.Errorf("Complete: error %v; want ErrStagingUnsupported", err)
		}
		f.checkCalls(t, map[string]int{})

		rec.Staged = rec.Staged[:99] // exactly the limit
		f.mustComplete(t, rec)
	})

	t.Run("result too large is refused before staging", func(t *testing.T) {
		f := setup(t)
		t0 := now()
		rec := record("fn#stagedlarge", t0)
		f.mustAcquire(t, rec, t0)
		f.calls.Reset()
		rec.Data = make([]byte, 500<<10)
		rec.Staged = []any{payment(f.table, "payment#large")}
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrResultNotStorable) {
			t.Errorf("Complete: error %v; want ErrResultNotStorable", err)
		}
		f.checkCalls(t, map[string]int{})
	})
}

func TestStageOutsideIdempotentHandler(t *testing.T) {
	err := dynamostore.Stage(t.Context(), payment("table", "payment#1"))
	if !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("Stage: error %v; want ErrNotStaging", err)
	}
}

// What Stage accepts, the completion commits: a write that Stage takes
// at the edge of a transaction's 4 MB is not refused by the completion
// after the work. The record the completion writes carries its lease and
// payload hash; a check at Stage that leaves them out accepts writes the
// completion then refuses. The write is sized to the last byte a check
// without them accepts (CheckStaging with the record as the stage saw it
// before the fix). moto does not enforce the 4 MB of a transaction: what
// can refuse here is the store's own check.
func TestStagedWritesAtTheTransactionLimitCommitOrAreRefusedByStage(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	blob := func(id string, n int) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
			"id":   &types.AttributeValueMemberS{Value: id},
			"blob": &types.AttributeValueMemberS{Value: strings.Repeat("b", n)},
		}}}
	}
	effects := 0
	var stageErr error
	_, err := e.Do(testCtx(t), "pay_full", []byte(`{"amount":1}`), func(ctx context.Context) ([]byte, error) {
		for i := range 10 {
			if err := dynamostore.Stage(ctx, blob(fmt.Sprintf("full#%d", i), 390_000)); err != nil {
				return nil, err
			}
		}
		id, _ := lambdakit.StagingRecord(ctx)
		var staged []any
		_ = lambdakit.StageFunc(ctx, func(s []any) ([]any, error) { staged = s; return nil, nil })
		lo, hi := 0, 400_000 // the largest last write the bare record admits
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if f.store.CheckStaging(lambdakit.IdempotencyRecord{ID: id, Staged: append(staged, blob("full#last", mid))}) == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if stageErr = dynamostore.Stage(ctx, blob("full#last", lo)); stageErr != nil {
			return nil, stageErr
		}
		effects++ // the card is charged
		return nil, nil
	})
	switch {
	case effects == 0 && errors.Is(stageErr, lambdakit.ErrStagedTooLarge):
		// Refused before the work: as good as committed.
	case effects == 1 && err == nil:
		if f.record(t, "full#last") == nil {
			t.Errorf("Do succeeded, but the last staged write is absent")
		}
	default:
		t.Errorf("effects %d, Stage: %v, Do: %v; want the writes Stage accepted committed after the work", effects, stageErr, err)
	}
}

// Stage refuses a write DynamoDB refuses for its values (a number it
// cannot hold, an empty set: the rules SetItem applies), before the work,
// rather than leave the completion to be refused after it. moto refuses
// the number; it takes the empty set in a transaction, which AWS refuses
// ("empty sets are not supported": DynamoDB Developer Guide, "Supported
// data types and naming rules", Sets), so that case asks Stage only.
func TestStageRefusesValuesDynamoDBRefuses(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	for i, v := range []types.AttributeValue{
		&types.AttributeValueMemberN{Value: "1e200"},
		&types.AttributeValueMemberSS{Value: []string{}},
	} {
		var stageErr error
		effects := 0
		_, err := e.Do(testCtx(t), fmt.Sprint("pay_values_", i), []byte(`{}`), func(ctx context.Context) ([]byte, error) {
			if stageErr = dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: fmt.Sprint("ledger#", i)}, "amount": v,
			}}}); stageErr != nil {
				return nil, stageErr
			}
			effects++ // the card is charged
			return nil, nil
		})
		if effects > 0 && err != nil {
			t.Errorf("value %d: Stage: %v; then, after the work, Do: %v; want Stage to refuse the write before it", i, stageErr, err)
		}
		if !errors.Is(stageErr, lambdakit.ErrInvalidItem) || !lambdakit.IsPermanent(stageErr) {
			t.Errorf("value %d: Stage: %v; want ErrInvalidItem, permanent", i, stageErr)
		}
	}
}

// Stage refuses, before the work, a write the completion's
// TransactWriteItems cannot carry, rather than leave the completion to
// fail after it: one missing a field the SDK requires (it refuses the
// whole request client-side: "missing required field"), one holding no
// action or two (DynamoDB takes exactly one), one whose key DynamoDB
// refuses (a key value is a non-empty string, number or binary of at most
// 2048 bytes: "Supported data types and naming rules", "Partition key
// value length"). Keys DynamoDB takes are staged.
func TestStageRefusesAWriteTheCompletionCannotSend(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	key := func(v types.AttributeValue) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": v}
	}
	id := key(&types.AttributeValueMemberS{Value: "ledger#1"})
	update := func(k map[string]types.AttributeValue) *types.Update {
		return &types.Update{TableName: aws.String(f.table), Key: k, UpdateExpression: aws.String("SET amount = :a"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberN{Value: "1"}}}
	}
	for _, c := range []struct {
		name string
		w    types.TransactWriteItem
	}{
		{"an update without its expression", types.TransactWriteItem{Update: &types.Update{TableName: aws.String(f.table), Key: id}}},
		{"a put without its table", types.TransactWriteItem{Put: &types.Put{Item: id}}},
		{"a delete without its key", types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(f.table)}}},
		{"a condition check without its condition", types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(f.table), Key: id}}},
		{"no action", types.TransactWriteItem{}},
		{"two actions", types.TransactWriteItem{Update: update(id), Delete: &types.Delete{TableName: aws.String(f.table), Key: id}}},
		{"an empty key", types.TransactWriteItem{Update: update(key(&types.AttributeValueMemberS{}))}},
		{"a key that is a map", types.TransactWriteItem{Update: update(key(&types.AttributeValueMemberM{Value: id}))}},
		{"a key over 2048 bytes", types.TransactWriteItem{Update: update(key(&types.AttributeValueMemberB{Value: make([]byte, 2049)}))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stageErr error
			effects := 0
			_, err := e.Do(testCtx(t), "pay_"+strings.ReplaceAll(c.name, " ", "_"), []byte(`{}`), func(ctx context.Context) ([]byte, error) {
				if stageErr = dynamostore.Stage(ctx, c.w); stageErr != nil {
					return nil, stageErr
				}
				effects++ // the card is charged
				return nil, nil
			})
			if !errors.Is(stageErr, lambdakit.ErrInvalidItem) || !lambdakit.IsPermanent(stageErr) {
				t.Errorf("Stage: %v (charged %d; then Do: %v); want ErrInvalidItem, permanent, before the work", stageErr, effects, err)
			}
		})
	}
	longest := strings.Repeat("k", awsrules.MaxPartitionKeyBytes)
	_, err := e.Do(testCtx(t), "pay_longest_key", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		return nil, dynamostore.Stage(ctx, types.TransactWriteItem{Update: update(key(&types.AttributeValueMemberS{Value: longest}))})
	})
	if err != nil || f.item(t, f.table, "id", longest) == nil {
		t.Errorf("Do: %v; want the update with the longest key staged and committed", err)
	}
}

// A result that would push the record and its staged writes past a
// transaction's 4 MB is dropped, as a result too large for the item is:
// the writes, which Stage accepted, commit with the completion, after the
// work, rather than the completion being refused. moto does not enforce
// the 4 MB of a transaction: the store's own check stands for AWS's.
func TestResultOverTheTransactionLimitIsDroppedNotTheCompletion(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	effects := 0
	_, err := e.Do(testCtx(t), "pay_big_result", []byte(`{"amount":1}`), func(ctx context.Context) ([]byte, error) {
		for i := range 10 { // 3.9 MB: room for the record, not for a 300 KB result
			if err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
				"id":   &types.AttributeValueMemberS{Value: fmt.Sprint("bigresult#", i)},
				"blob": &types.AttributeValueMemberS{Value: strings.Repeat("b", 390_000)},
			}}}); err != nil {
				return nil, err
			}
		}
		effects++ // the card is charged
		return []byte(`"` + strings.Repeat("r", 300_000) + `"`), nil
	})
	if err != nil {
		t.Fatalf("Do, after the work (%d effect): %v; want the completion without its result", effects, err)
	}
	if f.record(t, "bigresult#9") == nil {
		t.Errorf("the staged writes are absent; want them committed with the completion")
	}
}

// An effect declared after SetItem and the messages staged on the record
// (as outbox.PublishOnRecord does) goes on the record's item too: SetItem
// keeps room for the largest effect EffectDone keeps, so that an item it
// accepts is not refused by the completion after the effect. The item is
// sized to within a few bytes of the largest SetItem accepts beside the
// ledger rows, by a transaction's 4 MB, which moto does not enforce: the
// store's check before sending stands for AWS's. (At the 400 KB of the
// item itself, see TestCheckStagingAgreesWithTheCompletion: moto refuses
// items from 405,000 bytes, less than AWS's 400 KiB.)
func TestSetItemKeepsRoomForAnEffectDeclaredAfterIt(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	item := func(n int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"note": &types.AttributeValueMemberS{Value: strings.Repeat("n", n)}}
	}
	effects := 0
	var id string
	var setErr error
	_, err := e.Do(testCtx(t), "pay_effect_room", []byte(`{"amount":1}`), func(ctx context.Context) ([]byte, error) {
		staged := []any{dynamostore.RecordMessage{"body": &types.AttributeValueMemberS{Value: `{"paid":1}`}}}
		for i := range 10 { // the ledger rows, 3.9 MB
			staged = append(staged, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
				"id":   &types.AttributeValueMemberS{Value: fmt.Sprint("effectroom#", i)},
				"blob": &types.AttributeValueMemberS{Value: strings.Repeat("b", 390_000)},
			}}})
		}
		if err := lambdakit.Stage(ctx, staged...); err != nil {
			return nil, err
		}
		// The largest item the bare record (no lease, no payload hash)
		// admits is a little over what SetItem admits: step down to it.
		id, _ = lambdakit.StagingRecord(ctx)
		lo, hi := 0, 500_000
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if f.store.CheckStaging(lambdakit.IdempotencyRecord{ID: id, Item: item(mid), Staged: staged}) == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		for n := lo; n > lo-1024; n -= 16 {
			if setErr = dynamostore.SetItem(ctx, item(n)); setErr == nil {
				break
			}
		}
		if setErr != nil {
			return nil, setErr
		}
		effects++ // the card is charged
		lambdakit.EffectDone(ctx, "charge "+strings.Repeat("c", lambdakit.MaxEffectBytes))
		return nil, nil
	})
	switch {
	case effects == 0:
		t.Errorf("SetItem refused every item near the limit: %v", setErr)
	case err != nil:
		t.Errorf("SetItem accepted the item; after the effect, Do: %v; want the item committed", err)
	default:
		if rec := f.record(t, id); rec["note"] == nil || rec["effect"] == nil || f.record(t, "effectroom#9") == nil {
			t.Errorf("the record's item lacks the handler's item or the effect, or the ledger rows are absent")
		}
	}
}

// A staged op the store cannot write is refused by Stage, before the
// work, permanently, rather than by the completion after it.
func TestStageRefusesAnOpTheStoreCannotWrite(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	effects := 0
	var stageErr error
	_, err := e.Do(testCtx(t), "pay_wrong_op", []byte(`{}`), func(ctx context.Context) ([]byte, error) {
		w := payment(f.table, "payment#ptr")
		if stageErr = lambdakit.Stage(ctx, &w); stageErr != nil { // a pointer, not a types.TransactWriteItem
			return nil, stageErr
		}
		effects++ // the card is charged
		return nil, nil
	})
	if effects > 0 {
		t.Errorf("Stage accepted the op; after the work, Do: %v; want Stage to refuse it before", err)
	}
	if !errors.Is(stageErr, lambdakit.ErrStagingUnsupported) || !lambdakit.IsPermanent(stageErr) {
		t.Errorf("Stage: %v; want ErrStagingUnsupported, permanent", stageErr)
	}
}

// An item the handler changes after SetItem so that no completion can
// write it (here it names the record's own lease attribute, which
// CheckItem refuses) fails for good, as when SetItem refuses it: the work
// may have run, so the record is completed with the failure and the
// handler does not run again on the next delivery. Released instead, the
// key would let every delivery run the work again.
func TestAnItemChangedAfterSetItemIsNotRunAgain(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	runs := 0
	handler := func(ctx context.Context) ([]byte, error) {
		runs++
		item := map[string]types.AttributeValue{"note": &types.AttributeValueMemberS{Value: "n"}}
		if err := dynamostore.SetItem(ctx, item); err != nil {
			return nil, err
		}
		item["lease"] = &types.AttributeValueMemberS{Value: "mine"}
		return nil, nil
	}
	for delivery := 1; delivery <= 2; delivery++ {
		_, err := e.Do(testCtx(t), "pay_changed_item", []byte(`{"amount":1}`), handler)
		if !lambdakit.IsPermanent(err) {
			t.Errorf("delivery %d: %v; want a permanent failure", delivery, err)
		}
	}
	if runs != 1 {
		t.Errorf("the handler ran %d times; want once", runs)
	}
}

// Complete counts on the size a staging check passed (Checked) and adds
// only the result's while the result and the effect fit the room that
// check kept for an effect (lambdakit.MaxEffectBytes); past it, it counts
// anew. The item is the largest CheckStaging takes: a result and effect
// that fill the room pass the full count too (Checked false), and one
// byte more is refused before any request, checked or not. (moto refuses
// what is sent past 405,000 bytes, below DynamoDB's 400 KiB: the requests
// that pass the count are refused here, by moto, not by the store.)
func TestCompleteCountsOnACheckedStagingWithinTheRoomForAnEffect(t *testing.T) {
	f := setup(t)
	t0 := now()
	rec := record("fn#atlimit", t0)
	f.mustAcquire(t, rec, t0)
	item := func(n int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"blob": &types.AttributeValueMemberS{Value: strings.Repeat("b", n)}}
	}
	lo, hi := 0, 410_000 // the largest item CheckStaging takes, under 400 KiB
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if f.store.CheckStaging(lambdakit.IdempotencyRecord{ID: rec.ID, Lease: rec.Lease, Validation: rec.Validation, Item: item(mid)}) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	rec.Item = item(lo)
	rec.Status = lambdakit.StatusCompleted
	rec.Effect = "charge ch_1"
	for _, checked := range []bool{true, false} {
		rec.Checked = checked
		rec.Data = bytes.Repeat([]byte("r"), lambdakit.MaxEffectBytes-len(rec.Effect))
		if err := f.store.Complete(t.Context(), rec); errors.Is(err, lambdakit.ErrResultNotStorable) {
			t.Errorf("Checked %v: a result that fills the room refused: %v", checked, err)
		}
		rec.Data = append(rec.Data, 'r')
		f.calls.Reset()
		if err := f.store.Complete(t.Context(), rec); !errors.Is(err, lambdakit.ErrResultNotStorable) {
			t.Errorf("Checked %v: a result one byte past the room: %v; want ErrResultNotStorable", checked, err)
		}
		f.checkCalls(t, map[string]int{})
	}
}

// numbers is a list of n numbers, 1 each: the store counts each at 21
// bytes, its most, and moto at its digits.
func numbers(n int) types.AttributeValue {
	l := make([]types.AttributeValue, n)
	for i := range l {
		l[i] = &types.AttributeValueMemberN{Value: "1"}
	}
	return &types.AttributeValueMemberL{Value: l}
}

// longestList is the longest list of numbers, as the item's "nums", that
// the staging check takes beside staged for the record the handler of ctx
// completes.
func (f *fixture) longestList(ctx context.Context, staged ...any) int {
	id, _ := lambdakit.StagingRecord(ctx)
	lease, _ := lambdakit.StagingLease(ctx)
	lo, hi := 0, 20_000
	for lo < hi {
		mid := (lo + hi + 1) / 2
		rec := lambdakit.IdempotencyRecord{ID: id, Lease: lease, Item: map[string]types.AttributeValue{"nums": numbers(mid)}, Staged: staged}
		if f.store.CheckStaging(rec) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// A handler that fills its item after SetItem (here it replaces a list
// the staging check saw short with a longer one) leaves a count that is
// stale, not a completion that cannot be written: when its result no
// longer fits beside that item, the result is dropped, as for any result
// too large, and the item and the staged write commit. It must not fail
// the work for good. The item is a list of numbers, which the store counts
// at their most (21 bytes each) and moto at their digits, so that moto
// takes what DynamoDB would take.
func TestAResultThatNoLongerFitsAnItemFilledAfterSetItemIsDropped(t *testing.T) {
	f := setup(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	write := payment(f.table, "pay#filled")
	handler := func(ctx context.Context) ([]byte, error) {
		item := map[string]types.AttributeValue{"nums": numbers(1)}
		if err := dynamostore.SetItem(ctx, item); err != nil {
			return nil, err
		}
		if err := dynamostore.Stage(ctx, write); err != nil {
			return nil, err
		}
		// The longest list the staging check takes with this write: the
		// room it keeps for an effect is then all that is left.
		lo := f.longestList(ctx, write)
		// Filled past what SetItem was given, by about half that room:
		// the item fits, beside a result of 1,000 bytes it does not.
		item["nums"] = numbers(lo + lambdakit.MaxEffectBytes/2/22)
		return bytes.Repeat([]byte("r"), 1000), nil
	}
	if _, err := e.Do(testCtx(t), "pay_filled", nil, handler); err != nil {
		t.Fatalf("Do: %v; want the work completed without its result", err)
	}
	if f.item(t, f.table, "id", "pay#filled") == nil {
		t.Errorf("the staged write was not committed")
	}
}

// The same without staged writes, where the completion is one UpdateItem
// that only DynamoDB can refuse: a result that no longer fits beside an
// item filled after SetItem is dropped when the update is refused, and
// the item completes. moto's own limit is 405,000 bytes, and it counts a
// number by its digits, so it takes this item with the result; the proxy
// answers the first completion as DynamoDB answers an item past its
// limit (ValidationException), and forwards the rest.
func TestAResultThatNoLongerFitsAnItemFilledAfterSetItemIsDroppedWhenTheUpdateIsRefused(t *testing.T) {
	f := setupProxied(t)
	e := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	result := bytes.Repeat([]byte("r"), 1000)
	var id string
	handler := func(ctx context.Context) ([]byte, error) {
		item := map[string]types.AttributeValue{"nums": numbers(1)}
		if err := dynamostore.SetItem(ctx, item); err != nil {
			return nil, err
		}
		id, _ = lambdakit.StagingRecord(ctx)
		lo := f.longestList(ctx)
		// Filled past what SetItem was given, by about half the room
		// kept for an effect: the item fits, with the result it does not.
		item["nums"] = numbers(lo + lambdakit.MaxEffectBytes/2/22)
		lambdakit.EffectDone(ctx, "charge ch_1")
		return result, nil
	}
	f.proxy.Answer("UpdateItem", 1, 400, testenv.DynamoDBError("ValidationException", "Item size to update has exceeded the maximum allowed size"))
	out, err := e.Do(testCtx(t), "pay_filled_update", nil, handler)
	if err != nil || !bytes.Equal(out, result) {
		t.Fatalf("Do: %d bytes, %v; want the result, and the work completed without it", len(out), err)
	}
	if got := f.proxy.Count("UpdateItem"); got != 2 {
		t.Errorf("%d UpdateItem requests; want 2: the refused one, and the one without the result", got)
	}
	if _, ok := f.record(t, id)["nums"]; !ok {
		t.Errorf("the record has no nums; want the item completed")
	}
	again := lambdakit.NewOnce(f.store, func(o *lambdakit.Options) { o.Logger = discardLogger() })
	replayed, err := again.Do(testCtx(t), "pay_filled_update", nil, func(context.Context) ([]byte, error) {
		t.Error("the handler ran again")
		return nil, nil
	})
	if err != nil || replayed != nil {
		t.Errorf("a later delivery replays %d bytes, %v; want no result, no error", len(replayed), err)
	}
}

// A completion after the recovery point (EffectDone) that fails is sent
// again until the lease ends. When the first transaction landed and only
// its answer was lost, the second must not commit the staged writes a
// second time: the SDK's own retries reuse the transaction's
// ClientRequestToken, but each completion the engine sends again is a
// new request, with a new token, which DynamoDB applies anew.
func TestStagedWritesOfACompletionSentAgainAfterALostAnswerApplyOnce(t *testing.T) {
	f := setup(t)
	var lost atomic.Bool
	loseFirst := middleware.FinalizeMiddlewareFunc("loseFirstTransactionAnswer",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if err != nil || middleware.GetOperationName(ctx) != "TransactWriteItems" || !lost.CompareAndSwap(false, true) {
				return out, md, err
			}
			// The transaction landed; its answer never comes back,
			// and the SDK gives up on it (an error it does not retry,
			// as when its attempts time out).
			return middleware.FinalizeOutput{}, md, errors.New("answer lost")
		})
	client := local(t).Client(func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Insert(loseFirst, "Retry", middleware.After)
		})
	})
	e := lambdakit.NewOnce(newStore(t, client, f.table), func(o *lambdakit.Options) { o.Logger = discardLogger() })
	credit := types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(f.table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "balance#1"}},
		UpdateExpression:          aws.String("ADD amount :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "42"}},
	}}
	out, err := e.Do(testCtx(t), "pay-1", nil, func(ctx context.Context) ([]byte, error) {
		lambdakit.EffectDone(ctx, "charge ch_1")
		return []byte(`"ch_1"`), dynamostore.Stage(ctx, credit)
	})
	if !lost.Load() {
		t.Fatal("no transaction answer was lost; the test checks nothing")
	}
	if err != nil || string(out) != `"ch_1"` {
		t.Errorf("Do = %s, %v; want the result: the completion landed", out, err)
	}
	if got := num(t, f.record(t, "balance#1"), "amount"); got != "42" {
		t.Errorf("amount = %s; want 42: the staged credit committed once", got)
	}
	if got := str(t, f.record(t, "lambdakit#"+sha256Hex("pay-1")), "status"); got != "COMPLETED" {
		t.Errorf("status = %s; want COMPLETED", got)
	}
}
