// Command bench is `make bench`: it prints the project's performance
// figures as Markdown tables, all from one run. See internal/bench.
//
//	go run ./internal/bench/cmd/bench [flags]
//
// Sections (-only): micro, e2e, cold, flat. -moto-patch=false runs moto
// unpatched (LAMBDAKIT_MOTO_PATCH=0), to compare the flat-cost run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/bench"
)

type config struct {
	records, concurrency, batch, flat, cold, microCount int
	maxMotoRSS                                          int // MiB
	only                                                map[string]bool
	motoPatch                                           bool
	template, repo                                      string
	timeout                                             time.Duration
}

func main() {
	var c config
	var only string
	flag.IntVar(&c.records, "records", 1000, "records per end-to-end row")
	flag.IntVar(&c.concurrency, "concurrency", 2, "containers invoked at once")
	flag.IntVar(&c.batch, "batch", 10, "records per batch")
	flag.IntVar(&c.flat, "flat", 5000, "payments in the flat-cost run")
	flag.IntVar(&c.cold, "cold", 5, "cold starts per function")
	flag.IntVar(&c.maxMotoRSS, "flat-max-moto-rss", 4096, "stop the flat-cost run once moto_server's RSS passes this many MiB (0: never)")
	flag.IntVar(&c.microCount, "micro-count", 5, "runs of each micro benchmark")
	flag.StringVar(&only, "only", "micro,e2e,cold,flat", "sections to run, comma-separated")
	flag.BoolVar(&c.motoPatch, "moto-patch", true, "run moto through the launcher's patch (false: LAMBDAKIT_MOTO_PATCH=0)")
	flag.StringVar(&c.template, "template", "template.yaml", "the SAM template whose tables to create")
	flag.StringVar(&c.repo, "repo", ".", "the module's root")
	flag.DurationVar(&c.timeout, "timeout", 60*time.Second, "the function's timeout (template.yaml: 60s)")
	flag.Parse()
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		c.only[strings.TrimSpace(s)] = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
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
	command := "go run ./internal/bench/cmd/bench " + strings.Join(os.Args[1:], " ")

	var micro []bench.Micro
	if c.only["micro"] {
		fmt.Fprintln(os.Stderr, "bench: micro benchmarks ...")
		var err error
		if micro, err = bench.RunMicro(ctx, c.repo, "./lambdakit/", ".", c.microCount); err != nil {
			return err
		}
	}
	if !c.only["e2e"] && !c.only["cold"] && !c.only["flat"] {
		bench.PrintHeader(out, machine, strings.TrimSpace(command), "not used")
		bench.PrintMicro(out, micro, c.microCount)
		return nil
	}

	dir, err := os.MkdirTemp("", "lambdakit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lkBin, bareBin := filepath.Join(dir, "lambdakit", "bootstrap"), filepath.Join(dir, "bare", "bootstrap")
	fmt.Fprintln(os.Stderr, "bench: building the bootstraps ...")
	if err := bench.Build(ctx, c.repo, lkBin, "./functions/payment"); err != nil {
		return err
	}
	if err := bench.Build(ctx, c.repo, bareBin, "./internal/bench/bare"); err != nil {
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
		idem, payments, err := stack.Tables(ctx, template, "bench-"+name)
		if err != nil {
			return bench.Impl{}, nil, err
		}
		warm := bench.NewPayments(prefix + "w")
		return bench.Impl{
			Name: name, Path: bin, Env: stack.FunctionEnv(idem, payments),
			Warmup: func() []events.SQSMessage { return warm.Take(c.batch) },
		}, bench.NewPayments(prefix + "p"), nil
	}
	lk, lkPay, err := impl("lambdakit", lkBin, "L")
	if err != nil {
		return err
	}
	bare, barePay, err := impl("bare", bareBin, "B")
	if err != nil {
		return err
	}

	bench.PrintHeader(out, machine, strings.TrimSpace(command), stack.MotoVersion())
	if micro != nil {
		bench.PrintMicro(out, micro, c.microCount)
	}
	if c.only["e2e"] {
		fmt.Fprintln(os.Stderr, "bench: end to end ...")
		rows, err := h.EndToEnd(ctx, []bench.Impl{lk, bare}, []*bench.Payments{lkPay, barePay}, c.records, c.batch)
		if err != nil {
			return err
		}
		bench.PrintE2E(out, bench.E2EConfig{Records: c.records, Concurrency: c.concurrency, BatchSize: c.batch, Timeout: c.timeout}, rows)
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
		idem, payments, err := stack.Tables(ctx, template, "bench-flat")
		if err != nil {
			return err
		}
		flat := lk
		flat.Env = stack.FunctionEnv(idem, payments)
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
