package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// Impl is a bootstrap under measurement: the payment function, or the bare
// floor.
type Impl struct {
	// Name labels its rows: "lambdakit", "bare".
	Name string
	// Path is the bootstrap binary. Every process of it the harness finds
	// running is counted as one of its containers, so each Impl needs a
	// binary of its own.
	Path string
	// Env is the function's environment: endpoints, tables, gateway.
	Env []string
	// Warmup returns the batch each fresh container gets before it is
	// measured, so that rows compare warm containers (cold starts have a
	// table of their own). Its payments must be ones no scenario uses.
	// Nil: no warm-up.
	Warmup func() []events.SQSMessage
	// Commands, if set, counts the commands the function has sent to an
	// idempotency store outside the local stack (Valkey), and the reads
	// that carried them at a proxy (round trips, roughly): read before
	// and after each row. Nil: the function uses none.
	Commands func() (commands, reads int64)
}

// Scenario is one row of the end-to-end table: batches delivered to
// containers, Concurrency of them at a time.
type Scenario struct {
	// Name labels the row.
	Name string
	// Batches are the events, in order. Batch i goes to container
	// i % concurrency, so that a scenario with the same batches on reused
	// containers redelivers each batch to the container that first ran it.
	Batches [][]events.SQSMessage
	// Containers are warm containers to run on, from an earlier scenario
	// (see Run's return); nil starts fresh ones.
	Containers *Containers
	// Env is added to the function's environment in fresh containers: for
	// a row that differs by a setting of the function.
	Env []string
}

// Containers are running bootstraps of one Impl, kept warm between
// scenarios. Close them when done.
type Containers struct {
	impl    Impl
	runners []*runtimeapi.Runner
}

// Close stops every container.
func (c *Containers) Close() {
	if c == nil {
		return
	}
	for _, r := range c.runners {
		r.Close()
	}
}

// Row is what one scenario measured for one Impl.
type Row struct {
	Scenario, Impl string
	Records        int
	// Failed counts records the function reported failed, and every
	// record of an invocation that failed as a whole.
	Failed   int
	Wall     time.Duration
	Latency  []time.Duration // each invocation's duration, sorted
	Usage    Usage           // DynamoDB requests and computed units
	Gateway  int             // requests that reached the payment gateway
	CPU      time.Duration   // user+system CPU of the function's processes
	MotoCPU  time.Duration   // the same for moto_server
	PeakRSS  int64           // KiB, the largest VmHWM among the processes
	Failures []string        // a few reasons, for the report
	// DBConns and GatewayConns are the connections to DynamoDB (at the
	// proxy) and to the gateway during the row.
	DBConns, GatewayConns ConnStats
	// Commands and CommandReads are what Impl.Commands counted over the
	// row; -1 without it.
	Commands, CommandReads int64
}

// RecordsPerSecond is the row's throughput.
func (r Row) RecordsPerSecond() float64 { return float64(r.Records) / r.Wall.Seconds() }

// Percentile returns the p-th percentile (0-100) of invocation latency.
func (r Row) Percentile(p float64) time.Duration {
	if len(r.Latency) == 0 {
		return 0
	}
	i := int(float64(len(r.Latency)-1)*p/100 + 0.5)
	return r.Latency[i]
}

// PerRecord divides a count by the row's records.
func (r Row) PerRecord(v float64) float64 { return v / float64(r.Records) }

// Harness runs scenarios against one Stack.
type Harness struct {
	Stack *Stack
	// Concurrency is how many containers run batches at once.
	Concurrency int
	// Timeout is the function's timeout (template.yaml says 60 s).
	Timeout time.Duration
	// Progress, if set, gets a line as each row starts and each thousand
	// of a flat run ends.
	Progress io.Writer
	// MaxMotoRSS, if set, stops a flat run once moto_server's resident
	// set passes it, KiB.
	MaxMotoRSS int64
}

func (h *Harness) progress(format string, args ...any) {
	if h.Progress != nil {
		fmt.Fprintf(h.Progress, "bench:   "+format+"\n", args...)
	}
}

// Start starts n fresh containers of impl with extra environment env, each
// warmed up with one batch.
func (h *Harness) Start(ctx context.Context, impl Impl, n int, env []string) (*Containers, error) {
	c := &Containers{impl: impl}
	for range n {
		r, err := runtimeapi.NewRunner(impl.Path, func(o *runtimeapi.RunnerOptions) {
			o.FunctionName = "bench-" + impl.Name
			o.Timeout = h.Timeout
			o.MemoryMB = 256
			o.Env = append(slices.Clone(impl.Env), env...)
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.runners = append(c.runners, r)
		if impl.Warmup != nil {
			o, err := invoke(ctx, r, impl.Warmup())
			if err == nil && o.failed > 0 {
				err = errors.New(o.reason)
			}
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("bench: warming up %s: %w", impl.Name, err)
			}
		}
	}
	return c, nil
}

// outcome is one invocation's result as the harness sees it.
type outcome struct {
	duration time.Duration
	failed   int
	reason   string
}

// invoke runs one batch and reads its partial batch response.
func invoke(ctx context.Context, r *runtimeapi.Runner, recs []events.SQSMessage) (outcome, error) {
	event, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		return outcome{}, err
	}
	res, err := r.Invoke(ctx, event)
	if err != nil {
		return outcome{}, err
	}
	out := outcome{duration: res.Duration}
	if res.Outcome != runtimeapi.OutcomeSuccess {
		out.failed = len(recs)
		out.reason = res.Outcome.String()
		if res.Error != nil {
			out.reason += ": " + res.Error.Error()
		}
		return out, nil
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(res.Payload, &resp); err != nil {
		out.failed, out.reason = len(recs), "response is not a batch response: "+err.Error()
		return out, nil
	}
	out.failed = len(resp.BatchItemFailures)
	if out.failed > 0 {
		out.reason = fmt.Sprintf("%d of %d records reported failed", out.failed, len(recs))
	}
	return out, nil
}

// Run runs sc for impl and returns its row, with the containers it ran on
// still warm: pass them to a later scenario, or close them.
func (h *Harness) Run(ctx context.Context, impl Impl, sc Scenario) (Row, *Containers, error) {
	c := sc.Containers
	if c == nil {
		var err error
		if c, err = h.Start(ctx, impl, h.Concurrency, sc.Env); err != nil {
			return Row{}, nil, err
		}
	} else if c.impl.Name != impl.Name {
		return Row{}, nil, fmt.Errorf("bench: scenario %s reuses %s containers for %s", sc.Name, c.impl.Name, impl.Name)
	}
	row := Row{Scenario: sc.Name, Impl: impl.Name, Commands: -1, CommandReads: -1}
	var cmds0, reads0 int64
	if impl.Commands != nil {
		cmds0, reads0 = impl.Commands()
	}
	for _, b := range sc.Batches {
		row.Records += len(b)
	}
	pids := pidsOf(impl.Path)
	cpu0 := sumCPU(pids)
	moto0, _ := statCPU(h.Stack.Moto.PID)
	gw0 := h.Stack.Gateway.Requests()
	h.Stack.Meter.Take()
	h.Stack.Proxy.Conns.Reset()
	h.Stack.GatewayConns.Reset()

	outs, wall, err := h.drive(ctx, c, sc.Batches, nil)
	if err != nil {
		c.Close()
		return Row{}, nil, err
	}
	row.Wall = wall
	if impl.Commands != nil {
		cmds, reads := impl.Commands()
		row.Commands, row.CommandReads = cmds-cmds0, reads-reads0
	}
	row.Usage = h.Stack.Meter.Take()
	row.Gateway = h.Stack.Gateway.Requests() - gw0
	row.DBConns, row.GatewayConns = h.Stack.Proxy.Conns.Stats(), h.Stack.GatewayConns.Stats()
	row.CPU = sumCPU(pids) - cpu0
	moto1, _ := statCPU(h.Stack.Moto.PID)
	row.MotoCPU = moto1 - moto0
	for _, pid := range pids {
		if kb, err := memKB(pid, "VmHWM"); err == nil {
			row.PeakRSS = max(row.PeakRSS, kb)
		}
	}
	for _, o := range outs {
		row.Latency = append(row.Latency, o.duration)
		row.Failed += o.failed
		if o.reason != "" && len(row.Failures) < 3 {
			row.Failures = append(row.Failures, o.reason)
		}
	}
	slices.Sort(row.Latency)
	return row, c, nil
}

// timed is an invocation with the times it started and ended.
type timed struct {
	outcome
	start, end time.Time
}

// drive runs batches on c's containers, batch i on container i % n, the
// containers in parallel, and returns each batch's outcome in order. When
// each is non-nil it is called as each batch ends; once it returns false,
// no more batches start.
func (h *Harness) drive(ctx context.Context, c *Containers, batches [][]events.SQSMessage, each func(i int, t timed) bool) ([]outcome, time.Duration, error) {
	n := len(c.runners)
	outs := make([]outcome, len(batches))
	errs := make([]error, n)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		wg.Go(func() {
			for i := w; i < len(batches) && !stop.Load(); i += n {
				t0 := time.Now()
				o, err := invoke(ctx, c.runners[w], batches[i])
				if err != nil {
					errs[w] = err
					return
				}
				outs[i] = o
				if each != nil && !each(i, timed{outcome: o, start: t0, end: time.Now()}) {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return outs, time.Since(start), errors.Join(errs...)
}

func sumCPU(pids []int) time.Duration {
	var d time.Duration
	for _, pid := range pids {
		if t, err := goCPU(pid); err == nil {
			d += t
		}
	}
	return d
}

// ColdStart is what a fresh container costs before and at its first batch.
type ColdStart struct {
	Impl string
	// Init runs from the process's start to its first invocation/next:
	// the Runner's InitDuration.
	Init []time.Duration
	// FirstBatch is the first invocation's duration.
	FirstBatch []time.Duration
	// RSS is VmRSS after the first batch, KiB.
	RSS []int64
	// BinaryBytes is the bootstrap's size on disk.
	BinaryBytes int64
}

// ColdStarts starts n containers of impl one after another, each running
// the batch first() returns as its first invocation, and measures them.
func (h *Harness) ColdStarts(ctx context.Context, impl Impl, n int, first func() []events.SQSMessage) (ColdStart, error) {
	cs := ColdStart{Impl: impl.Name}
	for range n {
		r, err := runtimeapi.NewRunner(impl.Path, func(o *runtimeapi.RunnerOptions) {
			o.FunctionName = "bench-" + impl.Name
			o.Timeout = h.Timeout
			o.MemoryMB = 256
			o.Env = slices.Clone(impl.Env)
		})
		if err != nil {
			return cs, err
		}
		event, _ := json.Marshal(events.SQSEvent{Records: first()})
		res, err := r.Invoke(ctx, event)
		if err == nil && res.Outcome != runtimeapi.OutcomeSuccess {
			err = fmt.Errorf("bench: cold start of %s: %v", impl.Name, res.Outcome)
		}
		if err != nil {
			r.Close()
			return cs, err
		}
		cs.Init = append(cs.Init, res.InitDuration)
		cs.FirstBatch = append(cs.FirstBatch, res.Duration)
		for _, pid := range pidsOf(impl.Path) {
			if kb, err := memKB(pid, "VmRSS"); err == nil {
				cs.RSS = append(cs.RSS, kb)
			}
		}
		r.Close()
	}
	return cs, nil
}

// Thousand is one thousand records of a long run.
type Thousand struct {
	Records, Failed int
	Wall            time.Duration
	P50, P99        time.Duration
}

// FlatRun is a long run, thousand by thousand.
type FlatRun struct {
	Thousands []Thousand
	// MotoRSS is moto_server's peak resident set at the end, KiB.
	MotoRSS int64
	// Stopped says why the run ended early, if it did.
	Stopped string
}

// Flat delivers batches in order to fresh containers and reports each
// thousand records: the proof that cost does not grow with the tables.
// A thousand's wall time runs from the first start to the last end among
// its batches. With MaxMotoRSS set, it stops starting batches once
// moto_server's resident set passes it (plain moto's whole-table copies
// can eat the machine's memory).
func (h *Harness) Flat(ctx context.Context, impl Impl, batches [][]events.SQSMessage) (FlatRun, error) {
	var run FlatRun
	c, err := h.Start(ctx, impl, h.Concurrency, nil)
	if err != nil {
		return run, err
	}
	defer c.Close()
	var mu sync.Mutex
	times := make([]timed, len(batches))
	done := 0
	began := time.Now()
	_, _, err = h.drive(ctx, c, batches, func(i int, t timed) bool {
		mu.Lock()
		defer mu.Unlock()
		times[i] = t
		done += len(batches[i])
		rss, _ := memKB(h.Stack.Moto.PID, "VmRSS")
		if done%1000 < len(batches[i]) {
			h.progress("%d payments done after %v; moto_server's RSS %d MiB", done-done%1000, time.Since(began).Round(time.Second), rss/1024)
		}
		if h.MaxMotoRSS > 0 && rss > h.MaxMotoRSS && run.Stopped == "" {
			run.Stopped = fmt.Sprintf("stopped after %d payments: moto_server's resident set reached %d MiB (limit %d MiB)", done, rss/1024, h.MaxMotoRSS/1024)
			h.progress("%s", run.Stopped)
			return false
		}
		return true
	})
	if err != nil {
		return run, err
	}
	run.MotoRSS, _ = memKB(h.Stack.Moto.PID, "VmHWM")
	var cur Thousand
	var first, last time.Time
	var lat []time.Duration
	flush := func() {
		if cur.Records == 0 {
			return
		}
		cur.Wall = last.Sub(first)
		slices.Sort(lat)
		cur.P50 = lat[int(float64(len(lat)-1)*0.50+0.5)]
		cur.P99 = lat[int(float64(len(lat)-1)*0.99+0.5)]
		run.Thousands = append(run.Thousands, cur)
		cur, lat, first, last = Thousand{}, nil, time.Time{}, time.Time{}
	}
	for i, t := range times {
		if t.end.IsZero() {
			continue // not run: the run stopped early
		}
		if first.IsZero() || t.start.Before(first) {
			first = t.start
		}
		if t.end.After(last) {
			last = t.end
		}
		cur.Records += len(batches[i])
		cur.Failed += t.failed
		lat = append(lat, t.duration)
		if cur.Records >= 1000 {
			flush()
		}
	}
	flush()
	return run, nil
}
