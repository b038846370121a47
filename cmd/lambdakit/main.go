package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lambdakit/lambdakit/internal/cmdline"
)

// stdio is the outside world a command may touch, given to it when it is
// made, so that main alone reads the process's globals.
type stdio struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string // KEY=value, as os.Environ returns it
}

// A command is one subcommand, in a file of its own. Run parses args (the
// flags and arguments after the command's name) once, checks every input
// before anything starts, and does the work. Its error says how it ended:
// see internal/cmdline, whose ExitStatus maps it; nil is success.
type command interface {
	Run(ctx context.Context, args []string) error
}

// subcommand is a command as usage lists it.
type subcommand struct {
	name    string
	summary string
	cmd     command
}

// commands lists the subcommands, in the order usage shows them.
func commands(std stdio) []subcommand {
	return []subcommand{
		{"invoke", "run a bootstrap binary on event files through a local Lambda Runtime API", &invokeCommand{stdio: std}},
		{"run", "run a bootstrap on the messages of an SQS queue, as Lambda's event source mapping does", &runCommand{stdio: std}},
		{"deploy-local", "deploy a SAM template on a local AWS (moto_server), building its functions", &deployLocalCommand{stdio: std}},
		{"up", "run every event source mapping of a stack deployed on a local AWS, at once", &upCommand{stdio: std}},
		{"publish", "send JSON Lines to an SQS queue, with deduplication IDs from the consumer's idempotency key", &publishCommand{stdio: std}},
		{"records", "show, delete or list stuck idempotency records in DynamoDB", &recordsCommand{stdio: std}},
		{"redrive", "move messages from a dead-letter queue back to a queue, attributes, groups and dedup IDs kept", &redriveCommand{stdio: std}},
		{"resend", "send again the messages of the outbox relay's dead letters, with the IDs the relay gives them", &resendCommand{stdio: std}},
	}
}

func usage(w io.Writer, cmds []subcommand) {
	fmt.Fprint(w, `Usage: lambdakit <command> [flags] [arguments]

Local tooling for lambdakit functions: it runs the real function binary the
way Lambda does, without Docker.

Commands:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'lambdakit <command> -h' for a command's flags and exit statuses.
`)
}

// run dispatches to the subcommand named by args[0] and returns the exit
// status.
func run(ctx context.Context, std stdio, args []string) int {
	cmds := commands(std)
	if len(args) == 0 {
		usage(std.stderr, cmds)
		return cmdline.ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(std.stdout, cmds)
		return cmdline.ExitOK
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return cmdline.ExitStatus(std.stderr, "lambdakit "+c.name, "lambdakit "+c.name+" -h", c.cmd.Run(ctx, args[1:]))
		}
	}
	fmt.Fprintf(std.stderr, "lambdakit: unknown command %q\n\n", args[0])
	usage(std.stderr, cmds)
	return cmdline.ExitUsage
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
