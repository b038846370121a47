package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/tools/internal/chaos"
)

// The small version of `make chaos`, with a fixed seed: 60 payments, three
// messages each, three processes, every kind of fault, and kills often
// enough that some happen. No payment may be charged twice or lost, no
// completed payment may reach the gateway again, and no lock may be left.
func TestChaosSmall(t *testing.T) {
	testenv.RequireMotoServer(t)
	bootstrap := testenv.Build(t, "../../../functions/payment")
	var log strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, bootstrap, chaos.DefaultFaults, func(o *chaos.Options) {
		o.Template = "../../../template.yaml"
		o.Payments = 60
		o.Deliveries = 3
		o.Processes = 3
		o.Seed = 7
		o.Bound = 2 * time.Minute
		o.FunctionTimeout = 4 * time.Second
		o.Visibility = 500 * time.Millisecond
		o.MaxReceives = 4
		o.Gateway.MaxSlow = 2 * time.Second
		o.KillCompletion = 0.15
		o.KillCharge = 0.05
		o.KillRequest = 0.01
		o.FunctionLog = &log
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	if !rep.OK() {
		t.Errorf("a promise broke; see the table")
	}
	if len(rep.Lost) != 0 || len(rep.ChargedTwice) != 0 || len(rep.StuckLocks) != 0 || len(rep.CallsAfterCompletion) != 0 {
		t.Errorf("lost %v, charged twice %v, stuck %v, calls after completion %v; want none",
			rep.Lost, rep.ChargedTwice, rep.StuckLocks, rep.CallsAfterCompletion)
	}
	if got := rep.Charged + rep.Declined + len(rep.StillFailing); got != rep.Payments {
		t.Errorf("charged %d + declined %d + still failing %d = %d; want the %d payments",
			rep.Charged, rep.Declined, len(rep.StillFailing), got, rep.Payments)
	}
	// The run must have done what it claims, or it proves nothing.
	faults := int64(0)
	for _, n := range rep.DynamoFaults {
		faults += n
	}
	switch {
	case faults == 0:
		t.Error("no DynamoDB fault injected")
	case rep.Kills["between charge and completion"] == 0:
		t.Error("no process killed between charge and completion")
	case rep.GatewayUnavailable == 0:
		t.Error("no gateway failure")
	case rep.DuplicatesSkipped == 0:
		t.Error("no duplicate skipped")
	case rep.Reencoded == 0:
		t.Error("no re-encoded copy")
	case rep.ConcurrentPayments == 0:
		t.Error("no payment in two processes at once")
	case rep.Deliveries <= rep.Messages:
		t.Errorf("%d deliveries of %d messages; want retries too", rep.Deliveries, rep.Messages)
	}
	if t.Failed() {
		t.Logf("function log:\n%s", log.String())
	}
}
