// Command e2e plays the payment sample's story from the outside against a
// deployed stack: new payments, the same payments sent again, a poison
// payment, a crash after a charge, and each charge's event through the
// outbox, the relay and the events queue to the ledger. It publishes with
// 'lambdakit publish' and waits, each wait bounded, on what can be seen:
// ledger rows, ledger entries, dead-letter queues, and the charges the
// gateway counts (tools/internal/e2egw). `make e2e` runs it.
//
// By default it brings up the stack itself, on this machine: moto_server,
// the counting gateway, 'lambdakit deploy-local' of template.yaml and
// 'lambdakit up' beside it, then plays the story through the same code as
// -live, at the local endpoint.
//
// With -live it plays against a stack deployed elsewhere, named by
// -stack-name, whose outputs it reads through CloudFormation, and which
// something else runs (Lambda). The functions must reach a gateway of
// tools/e2e/gatewayfn (its URL is the payment function's
// PAYMENT_GATEWAY_URL, or -gateway). The crash is the payment function's
// fault switch, E2E_CRASH_AFTER_CHARGE, which the story sets and clears.
//
// Exit status: 0 when every check passed, 1 when one failed (the report
// says which), 2 for bad flags, 3 when the story could not be played.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	live := fs.Bool("live", false, "play against the stack -stack-name deployed on AWS (the credentials and region of the environment), which Lambda runs; without it, the story brings up its own stack on this machine")
	endpoint := fs.String("endpoint", "", "play against the stack -stack-name at this local AWS `URL` (a stack deployed by 'lambdakit deploy-local' that 'lambdakit up' runs): the path of -live, on loopback")
	stackName := fs.String("stack-name", "lambdakit-e2e", "the stack's `name`")
	gw := fs.String("gateway", "", "the counting gateway's base `URL` (default: the payment function's PAYMENT_GATEWAY_URL)")
	cli := fs.String("lambdakit", "bin/lambdakit", "the lambdakit `binary` to publish, deploy and run with")
	template := fs.String("template", "template.yaml", "the SAM `template` the local stack is deployed from")
	report := fs.String("report", "", "also write the report to `FILE`")
	wait := fs.Duration("wait", 0, "the bound of each wait for an outcome (default 90s locally, 15m with -live: a crashed payment comes back after the queue's 360 s visibility timeout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || (*live && *endpoint != "") {
		fmt.Fprintln(stderr, "e2e: -live and -endpoint exclude each other, and no arguments are taken")
		return 2
	}
	out := stdout
	if *report != "" {
		f, err := os.Create(*report)
		if err != nil {
			fmt.Fprintln(stderr, "e2e:", err)
			return 2
		}
		defer f.Close()
		out = io.MultiWriter(stdout, f)
	}
	dir, err := os.MkdirTemp("", "lambdakit-e2e-")
	if err != nil {
		fmt.Fprintln(stderr, "e2e:", err)
		return 3
	}
	defer os.RemoveAll(dir)
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	t := &target{stackName: *stackName, gateway: *gw, cli: *cli, live: *live, wait: *wait, poll: time.Second,
		runID: hex.EncodeToString(id), out: out, dir: dir}
	start := time.Now()
	switch {
	case *live:
		if t.wait == 0 {
			t.wait = 15 * time.Minute
		}
		t.env = os.Environ()
		t.cfg, err = awsconfig.LoadDefaultConfig(ctx)
		if err == nil {
			err = t.play(ctx)
		}
	case *endpoint != "":
		t.setLocal(*endpoint)
		err = t.play(ctx)
	default:
		t.setLocal("")
		err = t.playLocal(ctx, *template)
	}
	switch {
	case err == nil:
		t.say("e2e: every check passed in %s", time.Since(start).Round(time.Second))
		return 0
	case errors.Is(err, errCheckFailed):
		t.say("e2e: FAILED after %s", time.Since(start).Round(time.Second))
		return 1
	default:
		t.say("e2e: %v", err)
		return 3
	}
}
