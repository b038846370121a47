// Command chaos runs the payment sample under chaos and prints one table:
// deliveries, unique payments, distinct charges, payments charged more
// than once, payments lost, locks left stuck, lease-lost events and the
// time taken (see package tools/internal/chaos). `make chaos` runs it; the flags
// size the run and set the faults.
//
// Exit status: 0 when every promise held, 1 when one broke (the table
// names the payments), 2 for bad flags, 3 when the run could not be set up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lambdakit/lambdakit/tools/internal/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := chaos.Options{}
	chaos.DefaultFaults(&o)
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bootstrap := fs.String("bootstrap", "bin/bootstrap", "the payment function, built for this machine")
	fs.StringVar(&o.Template, "template", "template.yaml", "the SAM template whose tables are created")
	fs.IntVar(&o.Payments, "payments", 2000, "unique payments")
	fs.IntVar(&o.Deliveries, "deliveries", 3, "messages per payment (the original and copies), before retries")
	fs.IntVar(&o.Processes, "processes", 6, "function processes running at once")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the payments, the schedule and the faults")
	fs.DurationVar(&o.Bound, "bound", 10*time.Minute, "end the run after this long, whatever is left")
	fs.DurationVar(&o.FunctionTimeout, "timeout", 10*time.Second, "the function's timeout, and so its leases")
	fs.DurationVar(&o.Visibility, "visibility", 3*time.Second, "how long a failed message stays hidden, jittered by half")
	fs.IntVar(&o.MaxReceives, "max-receives", 8, "receives before a message goes to the dead-letter queue")
	fs.Float64Var(&o.Declined, "declined", o.Declined, "fraction of payments whose card is declined")
	fs.Float64Var(&o.Reencoded, "reencoded", o.Reencoded, "fraction of copies written by another JSON encoder")
	fs.Float64Var(&o.Concurrent, "concurrent", o.Concurrent, "fraction of payments with a copy run at the same moment in another process")
	fs.Float64Var(&o.Redelivered, "redelivered", o.Redelivered, "fraction of extra deliveries that are SQS delivering the original again after a success")
	fs.Float64Var(&o.Dynamo.ServerError, "ddb-500", o.Dynamo.ServerError, "fraction of DynamoDB requests answered 500 before moto")
	fs.Float64Var(&o.Dynamo.Throttle, "ddb-throttle", o.Dynamo.Throttle, "fraction of DynamoDB requests throttled before moto")
	fs.Float64Var(&o.Dynamo.Reset, "ddb-reset", o.Dynamo.Reset, "fraction of DynamoDB requests whose connection is reset before moto")
	fs.Float64Var(&o.Dynamo.Delay, "ddb-delay", o.Dynamo.Delay, "fraction of DynamoDB requests delayed")
	fs.DurationVar(&o.Dynamo.MaxDelay, "ddb-max-delay", o.Dynamo.MaxDelay, "longest DynamoDB delay")
	fs.Float64Var(&o.Dynamo.LostError, "ddb-lost-500", o.Dynamo.LostError, "fraction of DynamoDB requests applied by moto, then answered 500")
	fs.Float64Var(&o.Dynamo.LostReset, "ddb-lost-reset", o.Dynamo.LostReset, "fraction of DynamoDB requests applied by moto, then reset")
	fs.Float64Var(&o.Gateway.Fail, "gw-fail", o.Gateway.Fail, "fraction of gateway requests answered 503 (half after charging)")
	fs.Float64Var(&o.Gateway.Slow, "gw-slow", o.Gateway.Slow, "fraction of gateway answers delayed (half after charging)")
	fs.DurationVar(&o.Gateway.MaxSlow, "gw-max-slow", o.Gateway.MaxSlow, "longest gateway delay (the function gives up after 5s)")
	fs.Float64Var(&o.KillCompletion, "kill-completion", o.KillCompletion, "fraction of completions whose process is killed before they reach DynamoDB")
	fs.Float64Var(&o.KillCharge, "kill-charge", o.KillCharge, "fraction of new charges whose process is killed before the answer")
	fs.Float64Var(&o.KillRequest, "kill-request", o.KillRequest, "fraction of DynamoDB requests after which the process is killed")
	fs.BoolVar(&o.ConcurrentMoto, "concurrent-moto", false, "let requests reach moto_server concurrently (moto's conditional writes are then not atomic)")
	quiet := fs.Bool("q", false, "no progress lines on standard error")
	logFile := fs.String("function-log", "", "write every line the function processes print to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if !*quiet {
		o.Progress = stderr
	}
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 2
		}
		defer f.Close()
		o.FunctionLog = f
	}
	rep, err := chaos.Run(ctx, *bootstrap, func(opts *chaos.Options) { *opts = o })
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 3
	}
	if err := rep.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 3
	}
	if !rep.OK() {
		return 1
	}
	return 0
}
