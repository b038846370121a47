package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// Options configures Run. The zero value of each field means its default,
// except for the fault rates, where zero means none: DefaultFaults sets
// the ones `make chaos` uses.
type Options struct {
	// Template is the SAM template whose tables are created. Default
	// "template.yaml".
	Template string
	// Payments is how many unique payments there are. Default 2000.
	Payments int
	// Deliveries is how many messages carry each payment: the original,
	// then copies from producers (some re-encoded, some at the same moment
	// as the original in another process) or SQS delivering the original
	// again after it succeeded. Retries of failures come on top. Default 3.
	Deliveries int
	// Processes is how many function processes run at once. Default 6.
	Processes int
	// Seed makes the payments, the schedule and every fault draw
	// repeatable; which request meets which draw still depends on timing.
	Seed uint64
	// Bound ends the run, whatever is left, this long after it started.
	// Default 10 minutes.
	Bound time.Duration
	// FunctionTimeout is the function's timeout, and so every lease.
	// Default 10s.
	FunctionTimeout time.Duration
	// Visibility is how long a failed message stays hidden before it is
	// delivered again, jittered by half either way. Default 3s.
	Visibility time.Duration
	// MaxReceives is the queue's maxReceiveCount: after that many failed
	// receives a message goes to the dead-letter queue. Default 8.
	MaxReceives int
	// Declined is the fraction of payments whose card is declined.
	Declined float64
	// Reencoded is the fraction of producer copies written by another JSON
	// encoder.
	Reencoded float64
	// Concurrent is the fraction of payments with a copy that arrives while
	// another process runs the original.
	Concurrent float64
	// Redelivered is the fraction of a payment's extra deliveries that are
	// SQS delivering the original message again after it succeeded.
	Redelivered float64
	// Dynamo are the faults of every process's DynamoDB proxy.
	Dynamo DynamoFaults
	// Gateway are the payment gateway's faults.
	Gateway GatewayFaults
	// KillCompletion is the fraction of completions (the UpdateItem that
	// completes the record on the ledger row and writes the ledger fields;
	// a TransactWriteItems when the function also stages writes) whose
	// process is killed just before the request reaches DynamoDB: after
	// the charge, before the completion.
	KillCompletion float64
	// KillCharge is the fraction of new charges after which the gateway
	// kills the process before it hears the answer.
	KillCharge float64
	// KillRequest is the fraction of other DynamoDB requests after which the
	// process is killed: moto applied the request, the answer never comes.
	KillRequest float64
	// ConcurrentMoto lets requests reach moto_server concurrently instead
	// of one at a time; see Gate. Only for showing what moto does then.
	ConcurrentMoto bool
	// Progress, if set, receives a line about the run every few seconds.
	Progress io.Writer
	// FunctionLog, if set, receives every line the function processes
	// print, prefixed with the process number.
	FunctionLog io.Writer
}

// DefaultFaults sets the fault rates, kills and kinds of duplicates of
// `make chaos`: about one DynamoDB request in ten and one gateway request
// in eight goes wrong.
func DefaultFaults(o *Options) {
	o.Declined = 0.05
	o.Reencoded = 0.3
	o.Concurrent = 0.2
	o.Redelivered = 0.25
	o.Dynamo = DynamoFaults{
		ServerError: 0.02, Throttle: 0.02, Reset: 0.01, Delay: 0.03, LostError: 0.01, LostReset: 0.01,
		MaxDelay: 200 * time.Millisecond,
	}
	o.Gateway = GatewayFaults{Fail: 0.08, Slow: 0.04, MaxSlow: 6 * time.Second}
	o.KillCompletion = 0.01
	o.KillCharge = 0.01
	o.KillRequest = 0.002
}

func (o *Options) finish() error {
	if o.Template == "" {
		o.Template = "template.yaml"
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&o.Payments, 2000}, {&o.Deliveries, 3}, {&o.Processes, 6}, {&o.MaxReceives, 8}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.Bound, 10 * time.Minute}, {&o.FunctionTimeout, 10 * time.Second}, {&o.Visibility, 3 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	var errs []error
	if o.Payments < 0 || o.Deliveries < 0 || o.Processes < 0 || o.MaxReceives < 0 {
		errs = append(errs, errors.New("chaos: payments, deliveries, processes and receives must be positive"))
	}
	if o.Bound < 0 || o.FunctionTimeout < 2*time.Second || o.Visibility < 0 {
		errs = append(errs, errors.New("chaos: the bound and the visibility timeout must be positive, the function timeout at least 2s"))
	}
	for _, f := range []float64{o.Declined, o.Reencoded, o.Concurrent, o.Redelivered, o.KillCompletion, o.KillCharge, o.KillRequest} {
		if f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("chaos: fraction %v is outside [0, 1]", f))
		}
	}
	if err := o.Dynamo.check(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Gateway.check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Physical name of the template's payments table in moto.
const paymentsTable = "lambdakit-payments"

// The payments table as the sample writes it: each row is a payment's
// idempotency record, its key "payment#<payment_id>" and its status in
// record_status; once completed, the ledger's fields are on it too,
// among them the ledger's status (CHARGED, DECLINED).
const (
	ledgerKeyAttr    = "payment_id"
	recordStatusAttr = "record_status"
)

// ledgerKey is the key of paymentID's row, its record's ID.
func ledgerKey(paymentID string) string { return "payment#" + paymentID }

// batchSize is the event source's batch size, template.yaml's and FIFO's
// maximum.
const batchSize = 10

// seeds derives independent seeds for each use from the run's seed.
type seeds struct{ base uint64 }

func (s seeds) next(purpose, index uint64) uint64 {
	// SplitMix64 of the three, so that neighbouring seeds do not give
	// neighbouring streams.
	z := s.base + purpose*0x9e3779b97f4a7c15 + index*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// run is one chaos run in progress.
type run struct {
	opts  Options
	seeds seeds

	moto    *motoserver.Server
	gate    *Gate
	db      *dynamodb.Client // the run's own client, through the gate, no faults
	gw      *gateway.Gateway
	procs   []*process
	logs    *logStats
	src     *eventSource
	pays    []payment
	msgs    []*message
	started time.Time

	mu           sync.Mutex
	lastDeadline time.Time                  // the latest lease any invocation got
	outcomes     map[runtimeapi.Outcome]int // invocations by outcome, but for allFailed
	allFailed    int                        // function errors for a batch whose every record failed
	killsBy      map[string]int
}

// process is one function process: its runner and its own doors to
// DynamoDB and the gateway.
type process struct {
	runner *runtimeapi.Runner
	proxy  *Proxy
	front  *gatewayFront
}

// Run runs the payment bootstrap at path bootstrap (built for this
// machine) under chaos and reports what came of it. The error is non-nil
// only when the run could not be set up or its accounting could not be
// read; what the run found is in the Report.
func Run(ctx context.Context, bootstrap string, optFns ...func(*Options)) (*Report, error) {
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if err := o.finish(); err != nil {
		return nil, err
	}
	r := &run{
		opts: o, seeds: seeds{o.Seed}, logs: newLogStats(o.FunctionLog),
		outcomes: map[runtimeapi.Outcome]int{}, killsBy: map[string]int{},
		started: time.Now(),
	}
	ctx, cancel := context.WithDeadline(ctx, r.started.Add(o.Bound))
	defer cancel()
	defer r.stop()
	if err := r.setup(ctx, bootstrap); err != nil {
		return nil, err
	}
	r.plan()

	r.progressf("chaos: seed %d, %d payments, %d messages, %d processes, moto_server on %s", o.Seed, len(r.pays), len(r.msgs), o.Processes, r.moto.URL)
	r.deliver(ctx)
	_, _, dlq, _ := r.src.counts()
	r.waitLeases(ctx)
	// Records a killed process left in progress: their leases have ended,
	// so they block nothing, and the redrive takes them over.
	abandoned, err := r.inProgress(ctx)
	if err != nil && ctx.Err() == nil {
		return nil, err
	}

	// The operator fixes the cause and redrives the dead-letter queue.
	r.quiet()
	redriven := r.src.redrive()
	if redriven > 0 {
		r.progressf("chaos: redriving %d messages from the dead-letter queue, faults off", redriven)
		r.deliver(ctx)
		r.waitLeases(ctx)
	}
	for _, p := range r.procs {
		_ = p.runner.Close() // flushes their output into the logs
	}
	rep, err := r.account(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	rep.DLQAfterFaults, rep.Redriven, rep.AbandonedBeforeRedrive = dlq, redriven, len(abandoned)
	rep.BoundReached = ctx.Err() != nil
	rep.Elapsed = time.Since(r.started)
	return rep, nil
}

func (r *run) setup(ctx context.Context, bootstrap string) error {
	o := r.opts
	tables, err := samtemplate.Tables(o.Template)
	if err != nil {
		return err
	}
	if r.moto, err = motoserver.Start(); err != nil {
		return err
	}
	r.gate = NewGate(!o.ConcurrentMoto)
	cfg := r.moto.AWSConfig()
	cfg.HTTPClient = &http.Client{Transport: r.gate, Timeout: 2 * time.Minute}
	r.db = dynamodb.NewFromConfig(cfg)
	for logical, name := range map[string]string{"PaymentsTable": paymentsTable} {
		t, err := samtemplate.Find(tables, logical)
		if err != nil {
			return err
		}
		if err := t.Create(ctx, r.db, name); err != nil {
			return err
		}
	}
	r.gw = &gateway.Gateway{}
	r.gw.SetFaults(o.Gateway.Fail, r.seeds.next(1, 0))
	for k := range o.Processes {
		p := &process{}
		r.procs = append(r.procs, p)
		if p.proxy, err = NewProxy(r.moto.URL, r.gate, o.Dynamo, r.seeds.next(2, uint64(k))); err != nil {
			return err
		}
		kill := func() bool {
			if p.runner == nil {
				return false
			}
			return p.runner.Kill()
		}
		if p.front, err = newGatewayFront(r.gw, r.completed, o.Gateway, o.KillCharge, func() bool {
			ok := kill()
			if ok {
				r.countKill("after a new charge, before its answer")
			}
			return ok
		}, r.seeds.next(3, uint64(k))); err != nil {
			return err
		}
		r.armProxy(p, kill, rand.New(rand.NewPCG(r.seeds.next(4, uint64(k)), 0)))
		env := append(motoserver.Env(p.proxy.URL()),
			"PAYMENTS_TABLE="+paymentsTable,
			"PAYMENT_GATEWAY_URL="+p.front.url(),
		)
		sink := r.logs.sink(k)
		p.runner, err = runtimeapi.NewRunner(bootstrap, func(ro *runtimeapi.RunnerOptions) {
			ro.FunctionName = "lambdakit-payment-PaymentFunction"
			ro.Timeout = o.FunctionTimeout
			ro.MemoryMB = 256
			ro.LogFormat = "JSON"
			// DEBUG: a line for every message, duplicates included, which
			// the log reader counts (logs.go); at INFO a message that
			// succeeds has no line.
			ro.LogLevel = "DEBUG"
			ro.Env = env
			ro.Stdout, ro.Stderr = sink, sink
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// armProxy has p's proxy kill its process: just before a completion
// reaches DynamoDB (after the charge), or after other requests.
func (r *run) armProxy(p *process, kill func() bool, rng *rand.Rand) {
	o := r.opts
	p.proxy.SetKill(func(op string) KillPoint {
		// Called under the proxy's lock: rng is this proxy's alone.
		// dynamostore sends UpdateItem only to complete a record.
		if (op == "UpdateItem" || op == "TransactWriteItems") && rng.Float64() < o.KillCompletion {
			return KillPoint{Before: true}
		}
		if rng.Float64() < o.KillRequest {
			return KillPoint{After: true}
		}
		return KillPoint{}
	}, func(k KillPoint) {
		if !kill() {
			return
		}
		if k.Before {
			r.countKill("between charge and completion")
		} else {
			r.countKill("after a DynamoDB request took effect")
		}
	})
}

func (r *run) countKill(point string) {
	r.mu.Lock()
	r.killsBy[point]++
	r.mu.Unlock()
}

// quiet turns every fault and kill off.
func (r *run) quiet() {
	for _, p := range r.procs {
		_ = p.proxy.SetFaults(DynamoFaults{})
		p.proxy.SetKill(nil, nil)
		p.front.quiet()
	}
	r.gw.SetFaults(0, 0)
}

func (r *run) stop() {
	for _, p := range r.procs {
		if p.runner != nil {
			_ = p.runner.Close()
		}
		if p.proxy != nil {
			_ = p.proxy.Close()
		}
		if p.front != nil {
			p.front.close()
		}
	}
	r.moto.Stop()
}

// completed reports whether paymentID's row has its ledger fields, which
// the completion of its idempotency record writes.
func (r *run) completed(ctx context.Context, paymentID string) (bool, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(paymentsTable),
		Key:            map[string]types.AttributeValue{ledgerKeyAttr: &types.AttributeValueMemberS{Value: ledgerKey(paymentID)}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return false, err
	}
	return str(out.Item, "status") != "", nil
}

// plan makes the payments and their messages.
func (r *run) plan() {
	o := r.opts
	rng := rand.New(rand.NewPCG(r.seeds.next(5, 0), 0))
	r.pays = newPayments(o.Payments, o.Declined, rng)
	now := time.Now()
	var seq uint64
	newMsg := func(i int, body string) *message {
		seq++
		p := r.pays[i]
		return &message{
			id:      newMessageID(rng),
			pay:     i,
			body:    body,
			group:   p.CustomerID,
			dedupID: p.ID,
			sent:    now,
			seq:     seq,
			state:   stateQueued,
		}
	}
	var queued []*message
	for i, p := range r.pays {
		orig := newMsg(i, canonicalBody(p))
		r.msgs = append(r.msgs, orig)
		queued = append(queued, orig)
		for extra := 1; extra < o.Deliveries; extra++ {
			if rng.Float64() < o.Redelivered {
				orig.again++
				continue
			}
			body, differ := canonicalBody(p), false
			reencoded := rng.Float64() < o.Reencoded
			if reencoded {
				body, differ = reencode(p, rng, now.Add(time.Duration(extra)*time.Second))
			}
			m := newMsg(i, body)
			m.reencoded, m.valuesDiffer = reencoded, differ
			r.msgs = append(r.msgs, m)
			if extra == 1 && rng.Float64() < o.Concurrent {
				m.state = stateHeld
				orig.twin = m
				continue
			}
			queued = append(queued, m)
		}
	}
	rng.Shuffle(len(queued), func(i, j int) { queued[i], queued[j] = queued[j], queued[i] })
	r.src = newEventSource(queued, o.MaxReceives, o.Visibility, o.Processes, rand.New(rand.NewPCG(r.seeds.next(6, 0), 0)))
	// Held twins are not in the queue yet; the source finds them through
	// their partners.
}

// newMessageID returns an SQS-style message ID (a UUID).
func newMessageID(rng *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// deliver runs every process until the queue is drained or ctx ends.
func (r *run) deliver(ctx context.Context) {
	var wg sync.WaitGroup
	for k := range r.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				batch := r.src.take(ctx, k, batchSize)
				if batch == nil {
					return
				}
				r.invoke(ctx, k, batch)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			queued, inflight, dlq, deliveries := r.src.counts()
			r.mu.Lock()
			crashes := r.outcomes[runtimeapi.OutcomeCrash]
			r.mu.Unlock()
			r.progressf("chaos: %v: %d deliveries, %d messages waiting, %d in flight, %d in the DLQ, %d crashes, %d moto requests",
				time.Since(r.started).Round(time.Second), deliveries, queued, inflight, dlq, crashes, r.gate.Requests())
		}
	}
}

// invoke runs one batch on process k and settles its messages.
func (r *run) invoke(ctx context.Context, k int, batch []*message) {
	event := events.SQSEvent{Records: make([]events.SQSMessage, len(batch))}
	for i, m := range batch {
		event.Records[i] = sqsRecord(m)
	}
	payload, err := json.Marshal(event)
	if err != nil {
		panic(err) // strings and maps of strings always encode
	}
	start := time.Now()
	r.mu.Lock()
	if d := start.Add(r.opts.FunctionTimeout); d.After(r.lastDeadline) {
		r.lastDeadline = d
	}
	r.mu.Unlock()
	res, err := r.procs[k].runner.Invoke(ctx, payload)

	failed := map[string]failure{}
	allFailed := false
	failAll := func(f failure) {
		for _, m := range batch {
			failed[m.id] = f
		}
	}
	switch {
	case err != nil:
		failAll(failure{reason: "the run ended during the invocation: " + err.Error()})
	case res.Outcome == runtimeapi.OutcomeSuccess:
		var resp events.SQSEventResponse
		if err := json.Unmarshal(res.Payload, &resp); err != nil {
			failAll(failure{reason: fmt.Sprintf("unreadable response %q: %v", res.Payload, err)})
			break
		}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = failure{reported: true}
		}
	case res.Outcome == runtimeapi.OutcomeFunctionError && res.Error != nil && strings.Contains(res.Error.Message, lambdakit.ErrAllFailed.Error()):
		// Every record failed, and each has its log line.
		allFailed = true
		failAll(failure{reported: true})
	default:
		failAll(failure{reason: fmt.Sprintf("invocation %v: %v", res.Outcome, res.Error)})
	}
	r.mu.Lock()
	if allFailed {
		r.allFailed++
	} else {
		r.outcomes[res.Outcome]++
	}
	r.mu.Unlock()
	r.src.settle(batch, failed)
}

// waitLeases waits until every lease handed out has ended, so that no
// record is legitimately in progress any more.
func (r *run) waitLeases(ctx context.Context) {
	r.mu.Lock()
	last := r.lastDeadline
	r.mu.Unlock()
	// A second on top: stores keep lease ends to the millisecond, and
	// clocks are read at slightly different moments.
	sleepCtx(ctx, time.Until(last.Add(time.Second)))
}

func (r *run) progressf(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, format+"\n", args...)
	}
}

// inProgress returns the IDs of the idempotency records in progress.
func (r *run) inProgress(ctx context.Context) ([]string, error) {
	records, err := r.scan(ctx, paymentsTable)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, item := range records {
		if str(item, recordStatusAttr) == string(lambdakit.StatusInProgress) {
			ids = append(ids, str(item, ledgerKeyAttr))
		}
	}
	return ids, nil
}

// scan reads a whole table.
func (r *run) scan(ctx context.Context, table string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for range 100_000 { // a bound, far above any table here
		out, err := r.db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("chaos: scan %s: %w", table, err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
	return nil, fmt.Errorf("chaos: scan %s: too many pages", table)
}

func str(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
