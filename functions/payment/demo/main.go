package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lambdakit/lambdakit/internal/cmdline"
)

// prog is how the usage texts name this command.
const prog = "go run ./functions/payment/demo"

// stdio is the outside world the demo may touch, given to it when it is
// made, so that main alone reads the process's globals.
type stdio struct {
	stdout, stderr io.Writer
	environ        []string // KEY=value, as os.Environ returns it
}

// run runs the story, or local or deploy when args start with their name,
// and returns the exit status.
func run(ctx context.Context, std stdio, args []string) int {
	if len(args) > 0 && args[0] == "local" {
		err := (&localCommand{stdio: std}).Run(ctx, args[1:])
		return cmdline.ExitStatus(std.stderr, "demo local", prog+" local -h", err)
	}
	if len(args) > 0 && args[0] == "deploy" {
		err := (&deployCommand{stdio: std}).Run(ctx, args[1:])
		return cmdline.ExitStatus(std.stderr, "demo deploy", prog+" deploy -h", err)
	}
	err := (&demoCommand{stdio: std}).Run(ctx, args)
	return cmdline.ExitStatus(std.stderr, "demo", prog+" -h", err)
}

func main() {
	// The function runs in a process group of its own, out of reach of the
	// terminal's Ctrl-C: the signal must end the demo, which then stops
	// the function.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, stdio{stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()}, os.Args[1:])
	stop()
	os.Exit(code)
}
