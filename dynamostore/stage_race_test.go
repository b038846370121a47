package dynamostore_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A handler whose only effect is its staged write (single-phase mode) and
// whose staged write is guarded by optimistic concurrency (a version read
// before staging) loses a race with another message's debit of the same
// account. DynamoDB cancels the transaction with ConditionalCheckFailed on
// the staged write: nothing was committed, the work was NOT done, and a
// retry (which re-reads the version) succeeds. The engine must therefore
// let the message come back; it must not mark it permanent and poison its
// key with a Failure record, which loses the debit for good.
func TestStagedConditionLosingARaceIsRetried(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const account = "acct#1"
	putRaw(t, f, map[string]types.AttributeValue{
		"id":      &types.AttributeValueMemberS{Value: account},
		"balance": &types.AttributeValueMemberN{Value: "100"},
		"version": &types.AttributeValueMemberN{Value: "0"},
	})
	readAccount := func() (balance, version int) {
		item := f.item(t, f.table, "id", account)
		b, _ := strconv.Atoi(num(t, item, "balance"))
		v, _ := strconv.Atoi(num(t, item, "version"))
		return b, v
	}
	// debit is the write a message stages: balance -= amount, only if the
	// account is still at the version the handler read.
	debit := func(amount, version int) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:           aws.String(f.table),
			Key:                 map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: account}},
			UpdateExpression:    aws.String("SET balance = balance - :amt, version = version + :one"),
			ConditionExpression: aws.String("version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":amt": &types.AttributeValueMemberN{Value: strconv.Itoa(amount)},
				":one": &types.AttributeValueMemberN{Value: "1"},
				":v":   &types.AttributeValueMemberN{Value: strconv.Itoa(version)},
			},
		}}
	}
	runs := 0
	h := lambdakit.Idempotent(f.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Logger = discardLogger()
	})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		runs++
		_, v := readAccount()
		if runs == 1 {
			// Another message (another order) debits the same
			// account between this handler's read and its commit.
			if _, err := f.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:        aws.String(f.table),
				Key:              map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: account}},
				UpdateExpression: aws.String("SET balance = balance - :amt, version = version + :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":amt": &types.AttributeValueMemberN{Value: "5"},
					":one": &types.AttributeValueMemberN{Value: "1"},
				},
			}); err != nil {
				t.Errorf("concurrent debit: %v", err)
			}
		}
		if err := dynamostore.Stage(ctx, debit(10, v)); err != nil {
			return nil, err
		}
		return []byte(`"debited"`), nil
	}))

	msg := lambdakittest.Message(`{"id":"order-A"}`)
	var errs []error
	for range 3 { // SQS delivers it again until it succeeds
		_, err := h.Handle(ctx, &msg)
		errs = append(errs, err)
		if err == nil {
			break
		}
	}
	if errors.Is(errs[0], lambdakit.ErrPermanent) {
		t.Errorf("first delivery: got a permanent failure (%v); want a retryable one: the transaction committed nothing, so the debit was not done", errs[0])
	}
	if balance, _ := readAccount(); balance != 85 {
		t.Errorf("balance = %d after %d deliveries (errors %v); want 85 (100 - 5 - 10): order-A's debit is lost", balance, len(errs), errs)
	}
}

// Which cancellation reasons make a staged completion a rejected one (never
// retried: the engine records the failure) and which leave it retryable.
// DynamoDB's answers come from a proxy, since moto does not give every
// reason; the transaction holds the completion and two staged writes.
func TestStagedCancellationReasons(t *testing.T) {
	for _, c := range []struct {
		reasons  []string
		rejected bool
	}{
		{[]string{"None", "ValidationError", "None"}, true},
		{[]string{"None", "ItemCollectionSizeLimitExceeded", "None"}, true},
		{[]string{"ValidationError", "None", "None"}, true},
		// A conflict on one write must not hide an invalid other one.
		{[]string{"None", "TransactionConflict", "ValidationError"}, true},
		{[]string{"None", "ConditionalCheckFailed", "None"}, false},
		{[]string{"None", "TransactionConflict", "None"}, false},
	} {
		t.Run(strings.Join(c.reasons, ","), func(t *testing.T) {
			p := setupProxied(t, quickBackoff)
			rec := record("reasons", now())
			p.mustAcquire(t, rec, time.Now())
			p.proxy.Answer("TransactWriteItems", -1, http.StatusBadRequest, testenv.DynamoDBTransactionCanceled(c.reasons...))
			rec.Status = lambdakit.StatusCompleted
			rec.Staged = []any{ledgerPut(p.table, "a"), ledgerPut(p.table, "b")}
			err := p.store.Complete(t.Context(), rec)
			if err == nil || errors.Is(err, lambdakit.ErrCompletionRejected) != c.rejected {
				t.Errorf("got %v; want rejected: %v", err, c.rejected)
			}
		})
	}
}
