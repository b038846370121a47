// Command bench is `make bench`: it prints the project's performance
// figures as Markdown tables, all from one run. See tools/internal/bench.
//
//	go run ./tools/bench [flags]
//
// Sections (-only): micro, modes, cpu, e2e, sizes, delay, cold, flat. -moto-patch=false runs moto
// unpatched (LAMBDAKIT_MOTO_PATCH=0), to compare the flat-cost run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

type config struct {
	records, concurrency, batch, flat, cold, microCount int
	modes                                               int
	cpuRounds, cpuRecords, cpuRestart                   int
	firstSizes, redeliverySizes                         []int
	bodyBytes, sizeMinRecords, delayReps                int
	sizeTimeout, gatewayDelay, sizeGatewayDelay         time.Duration
	maxMotoRSS                                          int // MiB
	only                                                map[string]bool
	motoPatch, events                                   bool
	template, repo                                      string
	cpuProfile, functionProfiles                        string
	functionEnv                                         []string // -function-env, for both functions
	timeout                                             time.Duration
}

func main() {
	var c config
	var only, firstSizes, redeliverySizes string
	flag.IntVar(&c.records, "records", 1000, "records per end-to-end row")
	flag.IntVar(&c.concurrency, "concurrency", 2, "containers invoked at once")
	flag.IntVar(&c.batch, "batch", 10, "records per batch")
	flag.IntVar(&c.flat, "flat", 5000, "payments in the flat-cost run")
	flag.IntVar(&c.cold, "cold", 5, "cold starts per function")
	flag.IntVar(&c.maxMotoRSS, "flat-max-moto-rss", 4096, "stop the flat-cost run once moto_server's RSS passes this many MiB (0: never)")
	flag.IntVar(&c.microCount, "micro-count", 5, "runs of each micro benchmark")
	flag.IntVar(&c.cpuRounds, "cpu-rounds", 60, "rounds of the side-by-side first-delivery CPU comparison")
	flag.IntVar(&c.cpuRecords, "cpu-records", 250, "new payments per function per round of the CPU comparison")
	flag.IntVar(&c.cpuRestart, "cpu-restart-every", 10, "rounds of the CPU comparison each set of containers runs before new ones replace it (0: one set for every round)")
	flag.StringVar(&firstSizes, "sizes", "10,100,1000", "batch sizes of the first-delivery rows of the batch-size section")
	flag.StringVar(&redeliverySizes, "redelivery-sizes", "10,100,1000,10000", "batch sizes of its cold-redelivery rows")
	flag.IntVar(&c.bodyBytes, "body-bytes", 1024, "message body size in the batch-size section")
	flag.IntVar(&c.sizeMinRecords, "size-min-records", 1000, "a smaller batch size runs as many invocations as make this many records")
	flag.DurationVar(&c.sizeTimeout, "size-timeout", 5*time.Minute, "the function's timeout in the batch-size section")
	flag.DurationVar(&c.sizeGatewayDelay, "size-gateway-delay", 0, "if set, the gateway answers each charge of the batch-size section's first deliveries after this long")
	flag.DurationVar(&c.gatewayDelay, "gateway-delay", 300*time.Millisecond, "how long the gateway takes per charge in the delay section")
	flag.IntVar(&c.delayReps, "delay-reps", 3, "batches of 1 and of 10 each in the delay section")
	flag.IntVar(&c.modes, "modes", 500, "payments per idempotency mode in the modes section")
	flag.StringVar(&only, "only", "micro,modes,cpu,e2e,sizes,delay,cold,flat", "sections to run, comma-separated")
	flag.BoolVar(&c.motoPatch, "moto-patch", true, "run moto through the launcher's patch (false: LAMBDAKIT_MOTO_PATCH=0)")
	flag.StringVar(&c.template, "template", "template.yaml", "the SAM template whose tables to create")
	flag.StringVar(&c.repo, "repo", ".", "the module's root")
	flag.BoolVar(&c.events, "events", false, "set EVENTS_QUEUE_URL on the lambdakit function and the floor in every section but modes, so that both publish payment.charged on the payment's row, as the sample does by default")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to this file (the modes section runs lambdakit in it)")
	flag.StringVar(&c.functionProfiles, "function-profiles", "", "build the lambdakit and bare bootstraps with the benchprofile tag and have them write CPU profiles and counters under this folder (lambdakit/, bare/; see internal/benchprofile)")
	flag.DurationVar(&c.timeout, "timeout", 60*time.Second, "the function's timeout (template.yaml: 60s)")
	flag.Func("function-env", "NAME=VALUE added to the environment of every function the bench runs, lambdakit's and the floor's alike (repeatable): to compare them under a runtime setting such as GOMAXPROCS=1", func(kv string) error {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return fmt.Errorf("want NAME=VALUE, got %q", kv)
		}
		c.functionEnv = append(c.functionEnv, kv)
		return nil
	})
	flag.Parse()
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		c.only[strings.TrimSpace(s)] = true
	}
	var err error
	if c.firstSizes, err = sizes(firstSizes); err == nil {
		c.redeliverySizes, err = sizes(redeliverySizes)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if !c.motoPatch {
		os.Setenv("LAMBDAKIT_MOTO_PATCH", "0")
	}
	// Every AWS config the harness and its children build talks to
	// loopback only.
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	out := os.Stdout
	machine := bench.ThisMachine()
	command := "go run ./tools/bench " + strings.Join(os.Args[1:], " ")

	var micro []bench.Micro
	if c.only["micro"] {
		fmt.Fprintln(os.Stderr, "bench: micro benchmarks ...")
		var err error
		if micro, err = bench.RunMicro(ctx, c.repo, "./lambdakit/", ".", c.microCount); err != nil {
			return err
		}
	}
	var modes []bench.ModeRow
	modesMoto := "not used"
	if c.only["modes"] {
		// A stack of its own, closed before the functions' rows: its
		// tables and requests stay out of theirs.
		fmt.Fprintln(os.Stderr, "bench: idempotency modes ...")
		stack, err := bench.StartStack()
		if err != nil {
			return err
		}
		modes, err = stack.Modes(ctx, c.modes, c.batch)
		modesMoto = stack.MotoVersion()
		stack.Close()
		if err != nil {
			return err
		}
	}
	if !c.only["cpu"] && !c.only["e2e"] && !c.only["sizes"] && !c.only["delay"] && !c.only["cold"] && !c.only["flat"] {
		bench.PrintHeader(out, machine, strings.TrimSpace(command), modesMoto)
		if micro != nil {
			bench.PrintMicro(out, micro, c.microCount)
		}
		if modes != nil {
			bench.PrintModes(out, modesMoto, c.batch, modes)
		}
		return nil
	}

	dir, err := os.MkdirTemp("", "lambdakit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lkBin, bareBin := filepath.Join(dir, "lambdakit", "bootstrap"), filepath.Join(dir, "bare", "bootstrap")
	// The same function again, publishing payment.charged through the
	// outbox: a binary of its own, so that its processes are told apart.
	outboxBin := filepath.Join(dir, "lambdakit-outbox", "bootstrap")
	// And with its records on Valkey (a local redis-server).
	valkeyBin := filepath.Join(dir, "lambdakit-valkey", "bootstrap")
	fmt.Fprintln(os.Stderr, "bench: building the bootstraps ...")
	// Only the two functions the CPU comparison holds to the target are
	// profiled, when asked.
	var profiled []string
	if c.functionProfiles != "" {
		profiled = []string{"benchprofile"}
	}
	for _, bin := range []string{outboxBin, valkeyBin} {
		if err := bench.Build(ctx, c.repo, bin, "./functions/payment"); err != nil {
			return err
		}
	}
	if err := bench.Build(ctx, c.repo, lkBin, "./functions/payment", profiled...); err != nil {
		return err
	}
	if err := bench.Build(ctx, c.repo, bareBin, "./tools/bench/bare", profiled...); err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "bench: starting the local stack ...")
	stack, err := bench.StartStack()
	if err != nil {
		return err
	}
	defer stack.Close()
	h := &bench.Harness{Stack: stack, Concurrency: c.concurrency, Timeout: c.timeout, Progress: os.Stderr}
	template := filepath.Join(c.repo, c.template)

	// Each function gets tables of its own and payment IDs of the same
	// length, so that neither sees the other's records.
	impl := func(name, bin, prefix string) (bench.Impl, *bench.Payments, error) {
		payments, err := stack.Tables(ctx, template, "bench-"+name)
		if err != nil {
			return bench.Impl{}, nil, err
		}
		warm := bench.NewPayments(prefix + "w")
		return bench.Impl{
			Name: name, Path: bin, Env: append(stack.FunctionEnv(payments), c.functionEnv...),
			Warmup: func() []events.SQSMessage { return warm.Take(c.batch) },
		}, bench.NewPayments(prefix + "p"), nil
	}
	lk, lkPay, err := impl("lambdakit", lkBin, "L")
	if err != nil {
		return err
	}
	// The events queue is only named, as for lambdakit+outbox below: the
	// function never calls SQS, the relay would.
	eventsQueue := "EVENTS_QUEUE_URL=" + stack.Moto.URL + "/123456789012/bench-events.fifo"
	if c.events {
		lk.Env = append(lk.Env, eventsQueue)
	}
	bare, barePay, err := impl("bare", bareBin, "B")
	if err != nil {
		return err
	}
	// The floor does the same job: payment.charged on its row.
	if c.events {
		bare.Env = append(bare.Env, eventsQueue)
	}
	if c.functionProfiles != "" {
		lk.Env = append(lk.Env, "LAMBDAKIT_BENCH_PROFILE="+filepath.Join(c.functionProfiles, "lambdakit"))
		bare.Env = append(bare.Env, "LAMBDAKIT_BENCH_PROFILE="+filepath.Join(c.functionProfiles, "bare"))
		for _, name := range []string{"LAMBDAKIT_BENCH_PROFILE_HZ", "LAMBDAKIT_BENCH_PROFILE_MEMRATE"} {
			if v := os.Getenv(name); v != "" {
				lk.Env = append(lk.Env, name+"="+v)
				bare.Env = append(bare.Env, name+"="+v)
			}
		}
	}
	// lambdakit+outbox: its events queue is only named (a FIFO queue's
	// URL: each event needs its group); the function never calls SQS, the
	// relay would.
	withOutbox, outboxPay, err := impl("lambdakit+outbox", outboxBin, "O")
	if err != nil {
		return err
	}
	if err := stack.OutboxTable(ctx, "bench-outbox"); err != nil {
		return err
	}
	withOutbox.Env = append(withOutbox.Env, "OUTBOX_TABLE=bench-outbox", eventsQueue)
	// lambdakit+valkey: the records on a redis-server of its own, the
	// ledger on DynamoDB as before.
	withValkey, valkeyPay, err := impl("lambdakit+valkey", valkeyBin, "V")
	if err != nil {
		return err
	}
	rds, err := redisserver.Start()
	if err != nil {
		return err
	}
	defer rds.Stop()
	rdsProxy, err := redisserver.NewProxy(rds.Addr)
	if err != nil {
		return err
	}
	defer rdsProxy.Close()
	withValkey.Env = append(withValkey.Env, "IDEMPOTENCY_VALKEY_ADDR="+rdsProxy.Addr)
	withValkey.Commands = rdsProxy.Commands

	bench.PrintHeader(out, machine, strings.TrimSpace(command), stack.MotoVersion())
	if micro != nil {
		bench.PrintMicro(out, micro, c.microCount)
	}
	if modes != nil {
		bench.PrintModes(out, modesMoto, c.batch, modes)
	}
	if c.only["cpu"] {
		fmt.Fprintln(os.Stderr, "bench: first-delivery CPU, side by side ...")
		cmp, err := h.FirstDeliveryCPU(ctx, [2]bench.Impl{lk, bare}, [2]*bench.Payments{lkPay, barePay}, c.cpuRounds, c.cpuRecords, c.batch, c.cpuRestart)
		if err != nil {
			return err
		}
		bench.PrintCPU(out, cmp)
	}
	if c.only["e2e"] {
		fmt.Fprintln(os.Stderr, "bench: end to end ...")
		rows, err := h.EndToEnd(ctx, []bench.Impl{lk, bare, withOutbox, withValkey}, []*bench.Payments{lkPay, barePay, outboxPay, valkeyPay}, c.records, c.batch)
		if err != nil {
			return err
		}
		bench.PrintE2E(out, bench.E2EConfig{Records: c.records, Concurrency: c.concurrency, BatchSize: c.batch, Timeout: c.timeout}, rows)
	}
	if c.only["sizes"] {
		fmt.Fprintln(os.Stderr, "bench: batch sizes ...")
		cfg := bench.SizesConfig{
			Template: template, First: c.firstSizes, Redelivered: c.redeliverySizes,
			BodyBytes: c.bodyBytes, MinRecords: c.sizeMinRecords, Timeout: c.sizeTimeout, GatewayDelay: c.sizeGatewayDelay,
		}
		rows, err := h.BatchSizes(ctx, []bench.Impl{lk, bare}, cfg)
		if err != nil {
			return err
		}
		bench.PrintBatchSizes(out, cfg, rows)
	}
	if c.only["delay"] {
		fmt.Fprintln(os.Stderr, "bench: a slow gateway ...")
		rows, err := h.GatewayDelay(ctx, []bench.Impl{lk, bare}, []*bench.Payments{lkPay, barePay}, c.gatewayDelay, c.delayReps)
		if err != nil {
			return err
		}
		bench.PrintGatewayDelay(out, rows)
	}
	if c.only["cold"] {
		fmt.Fprintln(os.Stderr, "bench: cold starts ...")
		var css []bench.ColdStart
		for i, im := range []bench.Impl{lk, bare} {
			pay := []*bench.Payments{lkPay, barePay}[i]
			cs, err := h.ColdStarts(ctx, im, c.cold, func() []events.SQSMessage { return pay.Take(c.batch) })
			if err != nil {
				return err
			}
			fi, err := os.Stat(im.Path)
			if err != nil {
				return err
			}
			cs.BinaryBytes = fi.Size()
			css = append(css, cs)
		}
		bench.PrintColdStarts(out, css)
	}
	if c.only["flat"] && c.flat > 0 {
		fmt.Fprintf(os.Stderr, "bench: flat cost, %d payments ...\n", c.flat)
		payments, err := stack.Tables(ctx, template, "bench-flat")
		if err != nil {
			return err
		}
		flat := lk
		flat.Env = stack.FunctionEnv(payments)
		if c.events {
			flat.Env = append(flat.Env, eventsQueue)
		}
		pay := bench.NewPayments("Ff")
		h.MaxMotoRSS = int64(c.maxMotoRSS) << 10
		run, err := h.Flat(ctx, flat, bench.InBatches(pay.Take(c.flat), c.batch))
		if err != nil {
			return err
		}
		bench.PrintFlat(out, stack.MotoVersion(), c.concurrency, c.batch, run)
	}
	fmt.Fprintf(out, "Load average (1, 5, 15 min) at the end: %s.\n", bench.LoadAverage())
	return nil
}

// sizes parses a comma-separated list of batch sizes.
func sizes(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("batch size %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
