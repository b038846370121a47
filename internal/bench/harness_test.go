package bench_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/bench"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The harness, end to end on a small run: both bootstraps against moto,
// every row's requests, units and gateway calls per record are what the
// design says, and nothing fails. This is what makes `make bench`'s table
// trustworthy; it asserts counts, never speed.
func TestEndToEndRowsCountWhatTheDesignSays(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two bootstraps and runs them against moto")
	}
	testenv.RequireMotoServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lkBin, bareBin := filepath.Join(dir, "lambdakit", "bootstrap"), filepath.Join(dir, "bare", "bootstrap")
	if err := bench.Build(ctx, repo, lkBin, "./functions/payment"); err != nil {
		t.Fatal(err)
	}
	if err := bench.Build(ctx, repo, bareBin, "./internal/bench/bare"); err != nil {
		t.Fatal(err)
	}
	stack, err := bench.StartStack()
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()

	const records, batch = 20, 10
	var impls []bench.Impl
	var pays []*bench.Payments
	for _, im := range []struct{ name, bin, prefix string }{{"lambdakit", lkBin, "L"}, {"bare", bareBin, "B"}} {
		idem, ledger, err := stack.Tables(ctx, filepath.Join(repo, "template.yaml"), "test-"+im.name)
		if err != nil {
			t.Fatal(err)
		}
		warm := bench.NewPayments(im.prefix + "w")
		impls = append(impls, bench.Impl{
			Name: im.name, Path: im.bin, Env: stack.FunctionEnv(idem, ledger),
			Warmup: func() []events.SQSMessage { return warm.Take(batch) },
		})
		pays = append(pays, bench.NewPayments(im.prefix+"p"))
	}
	h := &bench.Harness{Stack: stack, Concurrency: 2, Timeout: 30 * time.Second}
	rows, err := h.EndToEnd(ctx, impls, pays, records, batch)
	if err != nil {
		t.Fatal(err)
	}

	// Per record: DynamoDB requests, write units, gateway calls.
	want := map[string]struct{ requests, wru, gateway float64 }{
		"first delivery":                    {2, 1 + 2*2, 1}, // conditional put; transaction of completion and ledger row
		"warm redelivery (same container)":  {0, 0, 0},       // the container remembers
		"cold redelivery (fresh container)": {0.1, 0, 0},     // one BatchGetItem per batch of 10 redelivered records
		"50/50 new and completed elsewhere": {1.1, 2.5, 0.5}, // the read ahead for the redelivered half
	}
	// Read units: one per redelivered record the read ahead asks for
	// (strongly consistent, items under 4 KB).
	wantReads := map[string]float64{"cold redelivery (fresh container)": records, "50/50 new and completed elsewhere": records / 2}
	if len(rows) != 2*len(want) {
		t.Fatalf("got %d rows; want %d", len(rows), 2*len(want))
	}
	for _, r := range rows {
		w, ok := want[r.Scenario]
		if !ok {
			t.Errorf("unexpected row %q", r.Scenario)
			continue
		}
		got := struct{ requests, wru, gateway float64 }{
			r.PerRecord(float64(r.Usage.Total())), r.PerRecord(r.Usage.WriteUnits), r.PerRecord(float64(r.Gateway)),
		}
		if r.Records != records || r.Failed != 0 || got != w || r.Usage.ReadUnits != wantReads[r.Scenario] {
			t.Errorf("%s, %s: %d records, %d failed %v, per record %+v, %v read units; want %d records, none failed, %+v, %v read units",
				r.Scenario, r.Impl, r.Records, r.Failed, r.Failures, got, r.Usage.ReadUnits, records, w, wantReads[r.Scenario])
		}
		if len(r.Latency) != records/batch || r.CPU <= 0 || r.PeakRSS <= 0 {
			t.Errorf("%s, %s: %d latencies, CPU %v, peak RSS %d KiB; want %d latencies and CPU and RSS measured",
				r.Scenario, r.Impl, len(r.Latency), r.CPU, r.PeakRSS, records/batch)
		}
	}

	cs, err := h.ColdStarts(ctx, impls[0], 1, func() []events.SQSMessage { return pays[0].Take(batch) })
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Init) != 1 || cs.Init[0] <= 0 || len(cs.RSS) != 1 || cs.RSS[0] <= 0 {
		t.Fatalf("cold start measured init %v, RSS %v; want one of each", cs.Init, cs.RSS)
	}
}
