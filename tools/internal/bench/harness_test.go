package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

// world is both bootstraps built and running against a local stack, each
// with tables of its own.
type world struct {
	repo   string
	stack  *bench.Stack
	impls  []bench.Impl
	pays   []*bench.Payments
	ledger []string // each Impl's payments table, with its records on the rows
}

const testBatch = 10

func newWorld(t *testing.T, ctx context.Context) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("builds two bootstraps and runs them against moto")
	}
	testenv.RequireMotoServer(t)
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lkBin, bareBin := filepath.Join(dir, "lambdakit", "bootstrap"), filepath.Join(dir, "bare", "bootstrap")
	if err := bench.Build(ctx, repo, lkBin, "./functions/payment"); err != nil {
		t.Fatal(err)
	}
	if err := bench.Build(ctx, repo, bareBin, "./tools/bench/bare"); err != nil {
		t.Fatal(err)
	}
	stack, err := bench.StartStack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	w := &world{repo: repo, stack: stack}
	for _, im := range []struct{ name, bin, prefix string }{{"lambdakit", lkBin, "L"}, {"bare", bareBin, "B"}} {
		ledger, err := stack.Tables(ctx, filepath.Join(repo, "template.yaml"), "test-"+im.name)
		if err != nil {
			t.Fatal(err)
		}
		warm := bench.NewPayments(im.prefix + "w")
		w.impls = append(w.impls, bench.Impl{
			Name: im.name, Path: im.bin, Env: stack.FunctionEnv(ledger),
			Warmup: func() []events.SQSMessage { return warm.Take(testBatch) },
		})
		w.pays = append(w.pays, bench.NewPayments(im.prefix+"p"))
		w.ledger = append(w.ledger, ledger)
	}
	return w
}

// The harness, end to end on a small run: both bootstraps against moto,
// every row's requests, units and gateway calls per record are what the
// design says, and nothing fails. This is what makes `make bench`'s table
// trustworthy; it asserts counts, never speed.
func TestEndToEndRowsCountWhatTheDesignSays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	const records, batch = 20, testBatch
	h := &bench.Harness{Stack: w.stack, Concurrency: 2, Timeout: 30 * time.Second}
	rows, err := h.EndToEnd(ctx, w.impls, w.pays, records, batch)
	if err != nil {
		t.Fatal(err)
	}

	// Per record: DynamoDB requests, write units, gateway calls. The
	// payment function and the bare floor keep the record on the ledger
	// row (measured: 2 write units for a new payment).
	type usage struct{ requests, wru, gateway float64 }
	want := map[string]usage{
		"first delivery":                    {2, 1 + 1, 1}, // conditional put of the in-progress row; update completing it with the ledger fields
		"warm redelivery (same container)":  {0, 0, 0},     // the container remembers
		"cold redelivery (fresh container)": {0.1, 0, 0},   // one BatchGetItem per batch of 10 redelivered records
		"50/50 new and completed elsewhere": {1.1, 1, 0.5}, // the read ahead for the redelivered half
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
		got := usage{
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

	cs, err := h.ColdStarts(ctx, w.impls[0], 1, func() []events.SQSMessage { return w.pays[0].Take(batch) })
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Init) != 1 || cs.Init[0] <= 0 || len(cs.RSS) != 1 || cs.RSS[0] <= 0 {
		t.Fatalf("cold start measured init %v, RSS %v; want one of each", cs.Init, cs.RSS)
	}
}

// The batch-size rows and the slow-gateway row on small sizes: what each
// row sends is what the design says, the records the harness writes for a
// cold redelivery are the ones the payment function leaves, and the
// connection counts see the function's connections.
func TestBatchSizeAndDelayRowsCountWhatTheDesignSays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	h := &bench.Harness{Stack: w.stack, Concurrency: 2, Timeout: 30 * time.Second}

	t.Run("seeded records are the ones the function leaves", func(t *testing.T) {
		msgs := bench.NewPayments("Sx").Padded(1024).Take(3)
		row, c, err := h.Run(ctx, w.impls[0], bench.Scenario{Name: "seed check", Batches: [][]events.SQSMessage{msgs}})
		c.Close()
		if err != nil || row.Failed != 0 {
			t.Fatalf("first delivery: %v, %d failed %v", err, row.Failed, row.Failures)
		}
		seeded, err := bench.CompletedRecords(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if len(seeded) != len(msgs) {
			t.Fatalf("got %d seeded records for %d payments", len(seeded), len(msgs))
		}
		records := dynamostore.NewRecords(w.stack.DB, w.ledger[0], bench.PaymentRecordNames)
		for id, s := range seeded {
			real, err := records.Get(ctx, id)
			if err != nil {
				t.Fatalf("the function left no record %s: %v", id, err)
			}
			var sd, rd struct{ Status, ChargeID string }
			_ = json.Unmarshal(s.Data, &sd)
			_ = json.Unmarshal(real.Data, &rd)
			if s.Status != real.Status || s.Validation != real.Validation || sd.Status != rd.Status || sd.Status == "" ||
				s.Expiration.Sub(real.Expiration).Abs() > time.Minute {
				t.Errorf("record %s: seeded %+v, data %s; the function's %+v, data %s; want the same status, validation, result shape and expiration",
					id, s, s.Data, real, real.Data)
			}
		}
	})

	t.Run("batch sizes", func(t *testing.T) {
		cfg := bench.SizesConfig{
			Template: filepath.Join(w.repo, "template.yaml"), First: []int{10, 30}, Redelivered: []int{10, 150},
			BodyBytes: 1024, MinRecords: 20, Timeout: time.Minute,
		}
		rows, err := h.BatchSizes(ctx, w.impls, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 8 {
			t.Fatalf("got %d rows; want 8", len(rows))
		}
		for _, r := range rows {
			invocations := max(1, (cfg.MinRecords+r.Size-1)/r.Size)
			name := r.Delivery + " of " + r.Impl
			if r.Failed != 0 || r.Invocations != invocations || r.Records != r.Size*invocations || len(r.Latency) != invocations {
				t.Errorf("%s, %d: %d failed %v, %d invocations, %d records; want none failed, %d invocations of %d",
					name, r.Size, r.Failed, r.Failures, r.Invocations, r.Records, invocations, r.Size)
			}
			if r.EventBytes < r.Size*cfg.BodyBytes || r.CPU <= 0 || r.PeakRSS <= 0 {
				t.Errorf("%s, %d: event of %d bytes, CPU %v, RSS %d KiB; want the bodies in the event, CPU and RSS measured",
					name, r.Size, r.EventBytes, r.CPU, r.PeakRSS)
			}
			// The function keeps connections open from its warm-up, and
			// never more than it runs records at once.
			if r.DBConns.MaxOpen < 1 || r.DBConns.MaxOpen > 64 {
				t.Errorf("%s, %d: %d connections to DynamoDB open at most; want between 1 and 64", name, r.Size, r.DBConns.MaxOpen)
			}
			switch r.Delivery {
			case bench.FirstDelivery:
				// Both complete the record on the ledger row with an
				// UpdateItem.
				completion := "UpdateItem"
				if r.Usage.Requests["PutItem"] != r.Records || r.Usage.Requests[completion] != r.Records || r.Usage.Total() != 2*r.Records || r.Gateway != r.Records {
					t.Errorf("%s, %d: requests %v, %d gateway calls; want a PutItem, a %s and a charge per record", name, r.Size, r.Usage.Requests, r.Gateway, completion)
				}
				if r.Size == 30 && r.DBConns.MaxOpen < 11 {
					t.Errorf("%s, 30: %d connections open at most; want more than the warm-up's 10", name, r.DBConns.MaxOpen)
				}
			case bench.ColdRedelivery:
				// One BatchGetItem per 100 records of each invocation.
				reads := invocations * ((r.Size + 99) / 100)
				if r.Usage.Requests["BatchGetItem"] != reads || r.Usage.Total() != reads || r.Gateway != 0 {
					t.Errorf("%s, %d: requests %v, %d gateway calls; want %d BatchGetItem and nothing else", name, r.Size, r.Usage.Requests, r.Gateway, reads)
				}
			}
		}
	})

	t.Run("slow gateway", func(t *testing.T) {
		const delay = 100 * time.Millisecond
		gw0 := w.stack.Gateway.Requests()
		rows, err := h.GatewayDelay(ctx, w.impls, w.pays, delay, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if len(r.One) != 1 || len(r.Ten) != 1 || r.Failed != 0 || r.One[0] < delay || r.Ten[0] < delay {
				t.Errorf("%s: batches of 1 took %v, of 10 %v, %d failed %v; want one of each, at least %v, none failed",
					r.Impl, r.One, r.Ten, r.Failed, r.Failures, delay)
			}
		}
		// Each function: its warm-up batch, then 1 + 10 charges.
		if got, want := w.stack.Gateway.Requests()-gw0, 2*(testBatch+11); got != want {
			t.Errorf("the gateway got %d requests; want %d", got, want)
		}
	})
}

// The side-by-side first-delivery CPU comparison, on a small run: every
// round runs both functions on new payments at once, the one started
// first alternating, and measures each one's CPU; nothing fails; after
// every two rounds new containers, warmed up alike, take over.
func TestFirstDeliveryCPURunsBothEachRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	h := &bench.Harness{Stack: w.stack, Concurrency: 2, Timeout: 30 * time.Second}
	gw0 := w.stack.Gateway.Requests()
	const rounds, records = 3, 20
	c, err := h.FirstDeliveryCPU(ctx, [2]bench.Impl{w.impls[0], w.impls[1]}, [2]*bench.Payments{w.pays[0], w.pays[1]}, rounds, records, testBatch, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Round) != rounds || len(c.Ratios()) != rounds || c.FailedTotal() != 0 {
		t.Fatalf("got %d rounds, %d failed; want %d, none failed", len(c.Round), c.FailedTotal(), rounds)
	}
	for i, r := range c.Round {
		if want := []string{"lambdakit", "bare"}[i%2]; r.First != want {
			t.Errorf("round %d: %s first; want %s (the order alternates)", i+1, r.First, want)
		}
		if want := 1 + i/2; r.Containers != want {
			t.Errorf("round %d: on containers %d; want %d (new ones after every 2 rounds)", i+1, r.Containers, want)
		}
		if r.CPU["lambdakit"] <= 0 || r.CPU["bare"] <= 0 {
			t.Errorf("round %d: CPU %v; want both measured", i+1, r.CPU)
		}
	}
	if m := c.MedianRatio(); m <= 0 || c.PooledRatio() <= 0 {
		t.Errorf("median ratio %v, pooled %v; want both positive", m, c.PooledRatio())
	}
	// Each function, for each of its two sets of containers: a warm-up
	// batch per container and the comparison's warm-up; then a charge per
	// record.
	if got, want := w.stack.Gateway.Requests()-gw0, 2*(2*(2*testBatch+c.Warmup)+rounds*records); c.Warmup <= 0 || got != want {
		t.Errorf("the gateway got %d requests; want %d: every record a new payment", got, want)
	}
}

// What each bootstrap writes for a healthy batch of 10 new payments at
// Lambda's default level, publishing payment.charged as deployed: the
// payment function its metrics line only (docs/operations.md, "What a
// batch writes"), the floor nothing; and on each payment's row the same
// event, in the same attribute, as the relay reads it, so that the CPU
// comparison with -events has both do the same job.
func TestHealthyBatchAtTheDefaultLevel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	queue := "EVENTS_QUEUE_URL=" + w.stack.Moto.URL + "/123456789012/bench-events.fifo"
	var rowEvents []map[string]any
	for i, im := range w.impls {
		var out lambdakittest.LogBuffer
		r, err := runtimeapi.NewRunner(im.Path, func(o *runtimeapi.RunnerOptions) {
			o.FunctionName = "bench-" + im.Name
			o.Timeout = 30 * time.Second
			o.LogFormat = "JSON" // as template.yaml; ApplicationLogLevel INFO, Lambda's default
			o.Env = append(im.Env, queue)
			o.Stdout, o.Stderr = &out, &out
		})
		if err != nil {
			t.Fatal(err)
		}
		msgs := w.pays[i].Take(testBatch)
		event, _ := json.Marshal(events.SQSEvent{Records: msgs})
		res, err := r.Invoke(ctx, event)
		r.Close() // waits for the process: its output is all in
		if err != nil || res.Outcome != runtimeapi.OutcomeSuccess {
			t.Fatalf("%s: %v, %v", im.Name, res.Outcome, err)
		}
		lines := out.Lines(t)
		want := map[string]int{"lambdakit": 1, "bare": 0}[im.Name]
		if len(lines) != want || (want == 1 && lines[0]["_aws"] == nil) {
			t.Errorf("%s wrote %d lines for a healthy batch of %d; want %d (lambdakit: its metrics line only):\n%s",
				im.Name, len(lines), testBatch, want, out.String())
		}
		rowEvents = append(rowEvents, rowEvent(t, ctx, w.stack.DB, w.ledger[i], msgs[0].Body))
	}
	if !reflect.DeepEqual(rowEvents[0], rowEvents[1]) {
		t.Errorf("payment.charged on the row:\nlambdakit %v\nbare      %v\nwant the same (but for the payment and charge IDs)", rowEvents[0], rowEvents[1])
	}
}

// rowEvent is the messages attribute of the row of the payment body in
// table, as plain values, with the IDs that differ between the two
// functions' payments taken out of the event's body.
func rowEvent(t *testing.T, ctx context.Context, db *dynamodb.Client, table, body string) map[string]any {
	t.Helper()
	var p struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]dbtypes.AttributeValue{"payment_id": &dbtypes.AttributeValueMemberS{Value: "payment#" + p.PaymentID}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs, _ := plain(out.Item["messages"]).([]any)
	if len(msgs) != 1 {
		t.Fatalf("%s: row of %s has messages %v; want one", table, p.PaymentID, msgs)
	}
	m, _ := msgs[0].(map[string]any)
	var ev map[string]any
	if err := json.Unmarshal([]byte(fmt.Sprint(m["body"])), &ev); err != nil || ev["payment_id"] != p.PaymentID || ev["charge_id"] == "" {
		t.Fatalf("%s: event body %v (%v); want payment.charged of %s with a charge ID", table, m["body"], err, p.PaymentID)
	}
	delete(ev, "payment_id")
	delete(ev, "charge_id")
	m["body"] = ev
	return m
}

// plain is av as Go values: strings, maps and lists (numbers as strings).
func plain(av dbtypes.AttributeValue) any {
	switch v := av.(type) {
	case *dbtypes.AttributeValueMemberS:
		return v.Value
	case *dbtypes.AttributeValueMemberN:
		return v.Value
	case *dbtypes.AttributeValueMemberM:
		m := map[string]any{}
		for k, e := range v.Value {
			m[k] = plain(e)
		}
		return m
	case *dbtypes.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = plain(e)
		}
		return l
	}
	return fmt.Sprintf("%T", av)
}

// The modes section on a small run: each mode's requests and units per
// payment are what the design says (5, 2 and 1 write units for a new
// payment; an event on the record adds none, one through the outbox
// table 3; nothing for a warm duplicate; a failed conditional write for
// a resent one), and an event on the record leaves its item under the
// 1 KB at which its completion would cost one more unit.
func TestModesCountWhatTheDesignSays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs against moto")
	}
	testenv.RequireMotoServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack, err := bench.StartStack()
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	rows, err := stack.Modes(ctx, testBatch, testBatch)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		newRequests, newWRU, coldWRU float64
	}{{2, 5, 1}, {2, 2, 1}, {2, 2, 1}, {2, 5, 1}, {1, 1, 1}, {1, 1, 1}, {1, 4, 4}, {1, 4, 4}}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows; want %d", len(rows), len(want))
	}
	for i, r := range rows {
		per := func(v float64) float64 { return v / float64(r.Messages) }
		if got := per(float64(r.New.Total())); got != want[i].newRequests {
			t.Errorf("%s: %v requests per new payment (%v); want %v", r.Mode, got, r.New.Requests, want[i].newRequests)
		}
		if got := per(r.New.WriteUnits); got != want[i].newWRU {
			t.Errorf("%s: %v WRU per new payment; want %v", r.Mode, got, want[i].newWRU)
		}
		if r.Warm.Total() != 0 {
			t.Errorf("%s: warm duplicates made requests %v; want none", r.Mode, r.Warm.Requests)
		}
		if got := per(r.Cold.WriteUnits); got != want[i].coldWRU || per(float64(r.Cold.Total())) != 1 {
			t.Errorf("%s: resent duplicate %v WRU, requests %v; want %v WRU in one request", r.Mode, got, r.Cold.Requests, want[i].coldWRU)
		}
		// An event on the record rides on its item: the mode before it is
		// the same without the event.
		if strings.Contains(r.Handler, "PublishOnRecord") && (r.LargestItem <= rows[i-1].LargestItem || r.LargestItem > 1024) {
			t.Errorf("%s: largest item %d bytes; want more than without the event (%d), at most 1024", r.Mode, r.LargestItem, rows[i-1].LargestItem)
		}
		if got := per(float64(r.Redelivered.Total())); got != 1.0/testBatch || r.Redelivered.WriteUnits != 0 {
			t.Errorf("%s: redelivered duplicates %v; want one read ahead per batch, no write", r.Mode, r.Redelivered.Requests)
		}
	}
}
