package lambdakittest_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A crash after the charge, before the completion: the redelivery, once
// the lease has ended, must not charge again.
func ExampleCrashStore() {
	charges := 0
	charge := func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		charges++
		lambdakit.EffectDone(ctx, "charge ch_1") // the recovery point
		return nil, nil
	}
	clock := lambdakittest.NewClock(time.Now())
	// newBatch is one container: a handler of its own, on the test's clock.
	newBatch := func(store lambdakit.Store) lambdakit.BatchFunc {
		idempotent := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
			o.StoreEffect = true // keep the recovery point in the store
			o.LeaseWithoutDeadline = time.Minute
			o.Now = clock.Now
			o.Logger = slog.New(slog.DiscardHandler)
		})
		return lambdakit.Batch(idempotent(lambdakit.HandlerFunc(charge)), func(o *lambdakit.BatchOptions) {
			o.Logger = slog.New(slog.DiscardHandler)
		})
	}
	store := &lambdakittest.MemoryStore{}
	crashing := lambdakittest.NewCrashStore(store)
	crashing.CrashBeforeCompletion()
	msg := lambdakittest.Message(`{"payment_id": "pay_1"}`)
	_, _ = newBatch(crashing)(context.Background(), lambdakittest.Event(msg)) // the process dies: no answer

	clock.Advance(time.Minute + time.Second) // the lease ends
	resp, _ := newBatch(store)(context.Background(), lambdakittest.Event(lambdakittest.Redelivery(msg)))
	fmt.Println("charges:", charges)
	fmt.Println("redelivery failed:", len(resp.BatchItemFailures) == 1)
	// Output:
	// charges: 1
	// redelivery failed: true
}
