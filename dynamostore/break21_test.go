package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// Tests from a review told to break the cost modes (ReadableIDs, SetItem,
// NeverExpire, StagedOnly). Each fails on the code it was written
// against.

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
func TestBreakSetItemNestedNilRepeatsTheWork(t *testing.T) {
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
func TestBreakSetItemEmptySetRefusedOnlyAfterTheWork(t *testing.T) {
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

// expressionSizes records the length of every UpdateItem's
// UpdateExpression the client sends.
type expressionSizes struct{ sizes []int }

func (x *expressionSizes) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("breakExpressionSize",
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
func TestBreakSetItemManyAttributesOverflowTheUpdateExpression(t *testing.T) {
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
func TestBreakBusinessItemWithStatusCompletedTakenAsRecord(t *testing.T) {
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
func TestBreakBusinessItemWithPastExpirationOverwritten(t *testing.T) {
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
