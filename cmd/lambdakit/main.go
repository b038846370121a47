package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses, shared by the commands so that scripts can rely on them.
const (
	exitOK          = 0   // everything worked
	exitFailed      = 1   // the command ran, and what it ran failed (a function error, a crash ...)
	exitUsage       = 2   // bad flags or arguments, or input that cannot be read
	exitCannotRun   = 3   // the tool itself could not do its job (a binary that will not start ...)
	exitInterrupted = 130 // SIGINT or SIGTERM, as shells report a SIGINT
)

// stdio is the outside world a command may touch, passed in so that main
// alone reads the process's globals.
type stdio struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string // KEY=value, as os.Environ returns it
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, std stdio, args []string) int
}

// commands lists the subcommands, in the order usage shows them.
func commands() []command {
	return []command{
		{"invoke", "run a bootstrap binary on event files through a local Lambda Runtime API", runInvoke},
		{"run", "run a bootstrap on the messages of an SQS queue, as Lambda's event source mapping does", runRun},
		{"local", "start local DynamoDB, the sandbox gateway and the tables, until Ctrl-C", runLocal},
		{"demo", "run the payment function on the sample events against local DynamoDB and a sandbox gateway", runDemo},
		{"publish", "send JSON lines to an SQS queue, with deduplication IDs from the consumer's idempotency key", runPublish},
		{"records", "show, delete or list stuck idempotency records in DynamoDB", runRecords},
		{"redrive", "move messages from a dead-letter queue back to a queue, attributes, groups and dedup IDs kept", runRedrive},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: lambdakit <command> [flags] [arguments]

Local tooling for lambdakit functions: it runs the real function binary the
way Lambda does, without Docker.

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'lambdakit <command> -h' for a command's flags and exit statuses.
`)
}

// run dispatches to the subcommand named by args[0] and returns the exit
// status.
func run(ctx context.Context, std stdio, args []string) int {
	if len(args) == 0 {
		usage(std.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(std.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, std, args[1:])
		}
	}
	fmt.Fprintf(std.stderr, "lambdakit: unknown command %q\n\n", args[0])
	usage(std.stderr)
	return exitUsage
}

func main() {
	// The function runs in a process group of its own, out of reach of the
	// terminal's Ctrl-C: the signal must end the command, which then stops
	// the function.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, stdio{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()}, os.Args[1:])
	stop()
	os.Exit(code)
}
