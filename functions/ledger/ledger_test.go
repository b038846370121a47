package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func TestMain(m *testing.M) { dynamostoretest.Run(m) }

// fixture is the function on a ledger table of its own, its requests
// counted at the client.
type fixture struct {
	table string
	calls *testenv.Counter
	store *dynamostore.Store
	db    *dynamodb.Client // not counted
}

func setup(t *testing.T) *fixture {
	t.Helper()
	local := dynamostoretest.Start(t)
	f := &fixture{table: local.NewTable(t), calls: new(testenv.Counter), db: local.Client()}
	store, err := dynamostore.New(local.Client(func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, f.calls.APIOption) }), f.table)
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	return f
}

// container is a fresh container of the function: no cache of its own.
func (f *fixture) container() lambdakit.BatchFunc {
	return newHandler(f.store, func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler); o.CacheSize = 100 })
}

func event(paymentID string) events.SQSMessage {
	return lambdakittest.Message(fmt.Sprintf(`{"type":"payment.charged","payment_id":%q,"order_id":"ord_1","customer_id":"cus_7","amount":1299,"currency":"EUR","charge_id":"ch_%s"}`, paymentID, paymentID))
}

func (f *fixture) run(t *testing.T, h lambdakit.BatchFunc, msgs ...events.SQSMessage) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := h(ctx, events.SQSEvent{Records: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (f *fixture) entry(t *testing.T, paymentID string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "entry#" + paymentID}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attr(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

func TestAnEventIsOneRequest(t *testing.T) {
	f := setup(t)
	h := f.container()
	if resp := f.run(t, h, event("pay_1")); len(resp.BatchItemFailures) > 0 {
		t.Fatalf("failures: %+v", resp.BatchItemFailures)
	}
	if f.calls.Total() != 1 || f.calls.Count("PutItem") != 1 {
		t.Errorf("requests %v; want one PutItem", f.calls.Counts())
	}
	e := f.entry(t, "pay_1")
	if attr(e, "customer_id") != "cus_7" || attr(e, "amount") != "1299" || attr(e, "charge_id") != "ch_pay_1" || attr(e, "status") != "COMPLETED" {
		t.Errorf("entry = %v", e)
	}
	if _, ok := e["expiration"]; ok {
		t.Error("the entry has a TTL; a ledger entry must stay")
	}

	f.calls.Reset()
	f.run(t, h, event("pay_1"))
	if f.calls.Total() != 0 {
		t.Errorf("warm duplicate: requests %v; want none", f.calls.Counts())
	}
	f.run(t, f.container(), lambdakittest.Redelivery(event("pay_1")))
	if f.calls.Total() != 1 || f.calls.Count("BatchGetItem") != 1 {
		t.Errorf("redelivered duplicate in a fresh container: requests %v; want the batch's read ahead", f.calls.Counts())
	}
}

// The same event in ten containers at once: one entry, every delivery
// succeeds.
func TestConcurrentDuplicatesWriteOneEntry(t *testing.T) {
	f := setup(t)
	var wg sync.WaitGroup
	failed := make(chan int, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed <- len(f.run(t, f.container(), event("pay_2")).BatchItemFailures)
		}()
	}
	wg.Wait()
	close(failed)
	for n := range failed {
		if n > 0 {
			t.Error("a delivery failed; want every duplicate answered")
		}
	}
	if f.calls.Count("PutItem") != 10 || f.calls.Total() != 10 {
		t.Errorf("requests %v; want one PutItem per delivery", f.calls.Counts())
	}
	if attr(f.entry(t, "pay_2"), "charge_id") != "ch_pay_2" {
		t.Error("no entry")
	}
}

func TestAnotherEventFailsPermanentlyWithoutARequest(t *testing.T) {
	if err := record(t.Context(), charged{Type: "payment.refunded", PaymentID: "pay_3"}); !errors.Is(err, errNotCharged) || !lambdakit.IsPermanent(err) {
		t.Errorf("got %v; want a permanent errNotCharged", err)
	}
	f := setup(t)
	refund := lambdakittest.Message(`{"type":"payment.refunded","payment_id":"pay_3"}`)
	resp := f.run(t, f.container(), refund, event("pay_4"))
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != refund.MessageId {
		t.Errorf("got %+v; want the refund failed, alone", resp)
	}
	// StagedOnly runs the handler first: the refund sent nothing.
	if f.calls.Total() != 1 || f.calls.Count("PutItem") != 1 || f.entry(t, "pay_3") != nil {
		t.Errorf("requests %v; want the charge's one PutItem, none for the refund", f.calls.Counts())
	}
}
