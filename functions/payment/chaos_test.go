package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Chaos: DynamoDB requests fail at random through the real SDK (half of
// them after taking effect), the gateway fails at random (half of them
// after charging), each payment is sent twice by its producer, and three
// function instances take batches while the queue redelivers every failed
// record. Every payment must end up charged once and recorded, and a
// payment that is completed (its ledger row has the ledger's status, which
// the completion writes; the row of a payment in progress has only its
// record's lock) must never reach the gateway again.
func TestPaymentChaos(t *testing.T) {
	f := setup(t, nil)
	gw := &gateway.Gateway{}
	gw.SetFaults(0.2, 11)
	var afterCompletion atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Idempotency-Key")
		if row := f.ledger(t, strings.TrimPrefix(id, "payment-")); attr(row, "status") != "" {
			afterCompletion.Add(1)
		}
		gw.ServeHTTP(w, r)
	}))
	defer srv.Close()

	faults := &testenv.Faults{Rate: 0.2, Seed: 5}
	faulty := dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, faults.APIOption)
	})
	cfg := f.cfg
	cfg.GatewayURL = srv.URL
	instances := make([]func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), 3)
	for i := range instances {
		instances[i] = mustHandler(t, cfg, faulty, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	}

	const payments = 20
	rng := rand.New(rand.NewPCG(7, 8))
	var queue []events.SQSMessage
	for i := range payments {
		b := body(fmt.Sprintf("pay_chaos_%02d", i), "cus_1", 100+i)
		queue = append(queue, lambdakittest.Message(b), lambdakittest.Message(b))
	}
	rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
	// SQS may deliver a message again even after it succeeded (a delete
	// that failed): each message gets up to two such extra deliveries.
	extra := map[string]int{}
	deadline := time.Now().Add(90 * time.Second)
	for round := 0; len(queue) > 0; round++ {
		if round == 300 || time.Now().After(deadline) {
			t.Fatalf("%d messages still failing after %d rounds", len(queue), round)
		}
		var next []events.SQSMessage
		for start := 0; start < len(queue); start += 10 {
			batch := queue[start:min(start+10, len(queue))]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, _ := instances[rng.IntN(len(instances))](ctx, lambdakittest.Event(batch...))
			cancel()
			failed := map[string]bool{}
			for _, x := range resp.BatchItemFailures {
				failed[x.ItemIdentifier] = true
			}
			for _, m := range batch {
				switch {
				case failed[m.MessageId]:
					next = append(next, lambdakittest.Redelivery(m))
				case extra[m.MessageId] < 2 && rng.IntN(3) == 0:
					extra[m.MessageId]++
					next = append(next, lambdakittest.Redelivery(m))
				}
			}
		}
		rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
		if len(next) == len(queue) {
			// No progress: a lock left by a lost answer waits for its
			// lease, the invocation deadline, to end.
			time.Sleep(500 * time.Millisecond)
		}
		queue = next
	}

	charges := map[string]string{}
	for _, c := range gw.Charges() {
		if _, dup := charges[c.PaymentID]; dup {
			t.Errorf("%s charged twice", c.PaymentID)
		}
		charges[c.PaymentID] = ""
	}
	for i := range payments {
		id := fmt.Sprintf("pay_chaos_%02d", i)
		row := f.ledger(t, id)
		if attr(row, "status") != StatusCharged || attr(row, "charge_id") == "" {
			t.Errorf("%s: got ledger row %v; want CHARGED with a charge_id", id, row)
		}
		if _, ok := charges[id]; !ok {
			t.Errorf("%s: never charged at the gateway", id)
		}
	}
	if n := afterCompletion.Load(); n != 0 {
		t.Errorf("got %d gateway requests for completed payments; want 0", n)
	}
	if faults.Injected() == 0 {
		t.Error("no DynamoDB faults injected; the test proves nothing")
	}
	t.Logf("%d DynamoDB faults injected, %d gateway requests for %d payments", faults.Injected(), gw.Requests(), payments)
}
