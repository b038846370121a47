package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// cmdFlags is a subcommand's flag set with the conventions every command
// shares, so that a mistake costs the user a line or two to read, not the
// whole manual:
//
//   - -h (or -help) prints the full usage: the text, the flags, the exit
//     statuses;
//   - a usage error (an unknown flag, a bad value, a flag after the
//     arguments, what the command itself finds wrong) prints the error, the
//     synopsis and how to get the full usage, in three lines;
//   - flags come before the arguments; one that comes after them is a usage
//     error, not an argument. "--" before the arguments ends the flags, for
//     an argument that starts with "-"; "-" alone is an argument (standard
//     input).
//
// Adopting it in a command is two changes: newFlags in place of
// flag.NewFlagSet (defining the flags on it as before), and parse in place
// of the Parse call and its error handling. usageError reports the
// command's own checks the same way.
type cmdFlags struct {
	*flag.FlagSet
	usage      string // the text before the flags; its first line is the synopsis
	exitStatus string // the text after the flags, if any
}

// newFlags returns an empty flag set for the command name ("invoke" for
// "lambdakit invoke"). usage is printed before the flags by -h and must
// start with the one-line synopsis ("Usage: lambdakit NAME ..."); exitStatus
// follows them and may be empty.
func newFlags(name, usage, exitStatus string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print the error and the whole usage itself;
	// parse reports errors in the short form instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, usage: usage, exitStatus: exitStatus}
}

// parse parses args and returns the arguments after the flags. When the
// command must stop here, because help was asked for (status exitOK) or the
// command line is wrong (exitUsage, reported on std.stderr), ok is false and
// code is the exit status to return.
func (f *cmdFlags) parse(std stdio, args []string) (rest []string, code int, ok bool) {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.printHelp(std.stderr)
			return nil, exitOK, false
		}
		return nil, f.usageError(std, "%v", err), false
	}
	rest = f.Args()
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		return rest, exitOK, true // everything after "--" is an argument
	}
	for _, a := range rest {
		if len(a) > 1 && strings.HasPrefix(a, "-") && a != "--" {
			return nil, f.usageError(std, "flag %s after the arguments: flags come before them", a), false
		}
	}
	return rest, exitOK, true
}

// usageError reports a wrong command line on std.stderr, in the short form
// (the error, the synopsis, where the full usage is), and returns exitUsage.
func (f *cmdFlags) usageError(std stdio, format string, args ...any) int {
	synopsis, _, _ := strings.Cut(strings.TrimLeft(f.usage, "\n"), "\n")
	fmt.Fprintf(std.stderr, "lambdakit %s: %s\n%s\nRun 'lambdakit %s -h' for the flags and details.\n",
		f.Name(), fmt.Sprintf(format, args...), synopsis, f.Name())
	return exitUsage
}

// printHelp writes the full usage to w.
func (f *cmdFlags) printHelp(w io.Writer) {
	fmt.Fprint(w, f.usage)
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	fmt.Fprint(w, f.exitStatus)
}
