package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/rie"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The sample's events through the real bootstrap under both emulators:
// lambdakit's (runtimeapi.Runner, what `lambdakit invoke` runs) and AWS's
// aws-lambda-rie (what runs in Lambda's base images and under `sam local
// invoke`). Each gets the same environment, a world of its own made alike
// (the same tables, emptied, and a new gateway behind the same URL), and the
// events in the order of events/README.md; then the answers, the charges
// and the ledger must be the same.

// rieEvents are the files of events/, in the order of its README, with
// the outcome each must have.
var rieEvents = []struct {
	file string
	want runtimeapi.Outcome
	// failed is how many records the response names in batchItemFailures.
	failed int
}{
	{"payments-new.json", runtimeapi.OutcomeSuccess, 0},
	{"payments-redelivered.json", runtimeapi.OutcomeSuccess, 0},
	{"payments-poison.json", runtimeapi.OutcomeSuccess, 4},
	{"payments-declined.json", runtimeapi.OutcomeSuccess, 0},
	{"payments-fifo.json", runtimeapi.OutcomeSuccess, 0},
	// Its one record fails, so the whole batch does: lambdakit's
	// AllFailedError.
	{"payments-mismatch.json", runtimeapi.OutcomeFunctionError, 0},
}

// rieWorld is the payment function's outside world, reset for each
// emulator.
type rieWorld struct {
	db     *dynamodb.Client
	tables map[string]string // physical name by logical ID
	defs   []samtemplate.Table
	gw     atomic.Pointer[gateway.Gateway]
	gwURL  string
	env    []string
}

func newRIEWorld(t *testing.T, srv *motoserver.Server) *rieWorld {
	w := &rieWorld{db: dynamodb.NewFromConfig(srv.AWSConfig())}
	all, err := samtemplate.Tables(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t)
	w.tables = map[string]string{"PaymentsTable": name + "-pay"}
	for _, logical := range []string{"PaymentsTable"} {
		def, err := samtemplate.Find(all, logical)
		if err != nil {
			t.Fatal(err)
		}
		w.defs = append(w.defs, def)
	}
	w.gw.Store(&gateway.Gateway{})
	gw := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { w.gw.Load().ServeHTTP(rw, r) }))
	t.Cleanup(gw.Close)
	w.gwURL = gw.URL
	// What `demo local` writes for the function, on this test's moto and
	// gateway: static test credentials, every call to 127.0.0.1.
	w.env = append(motoserver.Env(srv.URL),
		"PAYMENTS_TABLE="+w.tables["PaymentsTable"],
		"PAYMENT_GATEWAY_URL="+w.gwURL,
		"DEAD_LETTER_QUEUE_URL=",
	)
	return w
}

// reset empties the world: the tables made anew, a new gateway.
func (w *rieWorld) reset(t *testing.T) *gateway.Gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, logical := range []string{"PaymentsTable"} {
		name := w.tables[logical]
		_, err := w.db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		var missing *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &missing) {
			t.Fatal(err)
		}
		if err := w.defs[i].Create(ctx, w.db, name); err != nil {
			t.Fatal(err)
		}
	}
	gw := &gateway.Gateway{}
	w.gw.Store(gw)
	return gw
}

// ledger returns the payments table as ledger key ("payment#<payment_id>")
// → status.
func (w *rieWorld) ledger(t *testing.T) map[string]string {
	t.Helper()
	out, err := w.db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(w.tables["PaymentsTable"])})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, item := range out.Items {
		rows[attr(item, "payment_id")] = attr(item, "status")
	}
	return rows
}

// invoker is one of the two emulators.
type invoker interface {
	invoke(ctx context.Context, event []byte) (runtimeapi.Result, error)
	kill() bool
	close()
}

type ourInvoker struct{ r *runtimeapi.Runner }

func (o ourInvoker) invoke(ctx context.Context, event []byte) (runtimeapi.Result, error) {
	return o.r.Invoke(ctx, event)
}
func (o ourInvoker) kill() bool { return o.r.Kill() }
func (o ourInvoker) close()     { o.r.Close() }

type rieInvoker struct{ e *rie.Emulator }

func (r rieInvoker) invoke(ctx context.Context, event []byte) (runtimeapi.Result, error) {
	resp, err := r.e.Invoke(ctx, event)
	return resp.Result(), err
}
func (r rieInvoker) kill() bool { return r.e.KillFunction() }
func (r rieInvoker) close()     { r.e.Close() }

// rieRun is what one emulator made of the events.
type rieRun struct {
	results []runtimeapi.Result
	crash   runtimeapi.Result // the invocation killed after its charge
	retry   runtimeapi.Result // its redelivery
	charges []string          // the payment IDs charged, sorted
	ledger  map[string]string
}

func TestSampleEventsUnderAWSEmulator(t *testing.T) {
	srv := moto.Server(t)
	bin := rie.Binary(t)
	if v, err := rie.Version(context.Background()); err == nil {
		t.Logf("aws-lambda-rie %s", v)
	}
	bootstrap := testenv.Build(t, ".")
	fns, err := samtemplate.Functions(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := samtemplate.FindFunction(fns, "PaymentFunction")
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.Duration(fn.Timeout) * time.Second
	w := newRIEWorld(t, srv)

	starts := map[string]func(out *logline.Buffer) (invoker, error){
		"ours": func(out *logline.Buffer) (invoker, error) {
			r, err := runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
				o.FunctionName, o.Timeout, o.MemoryMB = e2eFunctionName, timeout, fn.MemorySize
				o.LogFormat, o.LogLevel = fn.LogFormat, fn.ApplicationLogLevel
				o.Env, o.Stdout, o.Stderr = w.env, out, out
			})
			return ourInvoker{r}, err
		},
		"aws-lambda-rie": func(out *logline.Buffer) (invoker, error) {
			e, err := rie.Start(bin, bootstrap, func(o *rie.Options) {
				o.FunctionName, o.Timeout, o.MemoryMB = e2eFunctionName, timeout, fn.MemorySize
				o.LogFormat, o.LogLevel = fn.LogFormat, fn.ApplicationLogLevel
				o.Env, o.Stdout, o.Stderr = w.env, out, out
			})
			return rieInvoker{e}, err
		},
	}
	// A new payment, for the crash: one message, the same bytes for both.
	crashEvent, err := json.Marshal(lambdakittest.Event(lambdakittest.Message(body("pay_9001", "cus_K", 700),
		func(m *events.SQSMessage) { m.MessageId = "3c1f0d52-6a0e-4a43-9d0c-0f6f3b0c9001" })))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]rieRun{}
	for _, who := range []string{"ours", "aws-lambda-rie"} {
		var out logline.Buffer
		gw := w.reset(t)
		inv, err := starts[who](&out)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		run, err := playRIEEvents(inv, gw, crashEvent)
		inv.close()
		if err != nil {
			t.Fatalf("%s: %v\noutput:\n%s", who, err, out.String())
		}
		run.ledger = w.ledger(t)
		runs[who] = run
	}

	ours, theirs := runs["ours"], runs["aws-lambda-rie"]
	for i, ev := range rieEvents {
		o, th := ours.results[i], theirs.results[i]
		if d := rie.Diff(o, th); d != "" {
			t.Errorf("%s: the emulators disagree:\n%s", ev.file, d)
		}
		if o.Outcome != ev.want {
			t.Errorf("%s: %v %s; want %v", ev.file, o.Outcome, o.Payload, ev.want)
			continue
		}
		if o.Outcome == runtimeapi.OutcomeSuccess {
			var resp struct {
				BatchItemFailures []json.RawMessage `json:"batchItemFailures"`
			}
			if err := json.Unmarshal(o.Payload, &resp); err != nil || len(resp.BatchItemFailures) != ev.failed {
				t.Errorf("%s: response %s; want %d batchItemFailures", ev.file, o.Payload, ev.failed)
			}
		}
		t.Logf("%s: %v %s", ev.file, o.Outcome, o.Payload)
	}
	if d := rie.Diff(ours.crash, theirs.crash); d != "" || ours.crash.Outcome != runtimeapi.OutcomeCrash {
		t.Errorf("killed after its charge: ours %v %s, aws-lambda-rie %v %s; want the same crash\n%s",
			ours.crash.Outcome, ours.crash.Payload, theirs.crash.Outcome, theirs.crash.Payload, d)
	}
	// The killed invocation's idempotency record stays in progress until
	// its lease ends, with the invocation's deadline: a redelivery before
	// then fails as a whole (SQS would bring it back after the visibility
	// timeout), and is not charged again.
	if d := rie.Diff(ours.retry, theirs.retry); d != "" || ours.retry.Outcome != runtimeapi.OutcomeFunctionError {
		t.Errorf("redelivered at once after the crash: ours %v %s, aws-lambda-rie %v %s; want the same function error\n%s",
			ours.retry.Outcome, ours.retry.Payload, theirs.retry.Outcome, theirs.retry.Payload, d)
	}
	if !slices.Equal(ours.charges, theirs.charges) || len(ours.charges) == 0 {
		t.Errorf("charges:\n  ours           %v\n  aws-lambda-rie %v\nwant the same, and some", ours.charges, theirs.charges)
	}
	if fmtMap(ours.ledger) != fmtMap(theirs.ledger) || len(ours.ledger) == 0 {
		t.Errorf("ledger:\n  ours           %v\n  aws-lambda-rie %v\nwant the same, and some", ours.ledger, theirs.ledger)
	}
}

// playRIEEvents runs the events, then crashEvent, a new payment whose
// function is killed once the gateway charged it, then its redelivery.
func playRIEEvents(inv invoker, gw *gateway.Gateway, crashEvent []byte) (rieRun, error) {
	var run rieRun
	invoke := func(event []byte) (runtimeapi.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return inv.invoke(ctx, event)
	}
	for _, ev := range rieEvents {
		event, err := os.ReadFile(filepath.Join("..", "..", "events", ev.file))
		if err != nil {
			return run, err
		}
		res, err := invoke(event)
		if err != nil {
			return run, err
		}
		run.results = append(run.results, res)
	}
	// The costliest moment for a crash: paid, not yet recorded.
	var killed atomic.Bool
	gw.OnCharge(func(gateway.Charge, string) {
		if !killed.Swap(true) {
			inv.kill()
		}
	})
	var err error
	if run.crash, err = invoke(crashEvent); err != nil {
		return run, err
	}
	gw.OnCharge(nil)
	if run.retry, err = invoke(crashEvent); err != nil {
		return run, err
	}
	for _, c := range gw.Charges() {
		run.charges = append(run.charges, c.PaymentID)
	}
	// A batch of a standard queue is processed concurrently: the order of
	// its charges is not the function's to keep.
	slices.Sort(run.charges)
	return run, nil
}

// fmtMap prints m in key order, for comparing maps.
func fmtMap(m map[string]string) string {
	b, _ := json.Marshal(m) // encoding/json sorts the keys
	return string(b)
}
