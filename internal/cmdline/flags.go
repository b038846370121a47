package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Flags is a command's flag set with the conventions every command
// shares, so that a mistake costs the user a line or two to read, not the
// whole manual:
//
//   - -h (or -help) prints the full usage: the text, the flags, the exit
//     statuses;
//   - a usage error (an unknown flag, a bad value, a flag after the
//     arguments, what the command itself finds wrong) is told by
//     ExitStatus in the short form: the error, the synopsis and how to get
//     the full usage, in three lines;
//   - flags come before the arguments; one that comes after them is a usage
//     error, not an argument. "--" before the arguments ends the flags, for
//     an argument that starts with "-"; "-" alone is an argument (standard
//     input).
//
// A command makes one with NewFlags, defines its flags on it, and calls
// ParseArgs once, at the start of its Run; UsageError reports the
// command's own checks the same way.
type Flags struct {
	*flag.FlagSet
	help       io.Writer // where -h prints the full usage
	usage      string    // the text before the flags; its first line is the synopsis
	exitStatus string    // the text after the flags, if any
}

// NewFlags returns an empty flag set for the command name ("invoke" for
// "lambdakit invoke"), whose -h prints the full usage on help. usage is
// printed before the flags and must start with the one-line synopsis
// ("Usage: lambdakit NAME ..."); exitStatus follows them and may be empty.
func NewFlags(help io.Writer, name, usage, exitStatus string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print the error and the whole usage itself;
	// ExitStatus reports errors in the short form instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, help: help, usage: usage, exitStatus: exitStatus}
}

// ParseArgs parses args and returns the arguments after the flags. When
// the command must stop here, the error says why: flag.ErrHelp after
// printing the full usage for -h, a usage error for a wrong command line.
func (f *Flags) ParseArgs(args []string) ([]string, error) {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.PrintHelp()
			return nil, err
		}
		return nil, f.UsageError("%v", err)
	}
	rest := f.Args()
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		return rest, nil // everything after "--" is an argument
	}
	for _, a := range rest {
		if len(a) > 1 && strings.HasPrefix(a, "-") && a != "--" {
			return nil, f.UsageError("flag %s after the arguments: flags come before them", a)
		}
	}
	return rest, nil
}

// Given returns the names of the flags the command line gave.
func (f *Flags) Given() map[string]bool {
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// UsageError returns a wrong command line as a usage error, which
// ExitStatus tells in the short form.
func (f *Flags) UsageError(format string, args ...any) error {
	synopsis, _, _ := strings.Cut(strings.TrimLeft(f.usage, "\n"), "\n")
	return &usageError{synopsis: synopsis, msg: fmt.Sprintf(format, args...)}
}

// PrintHelp writes the full usage, as -h does: for a command that takes
// -h where the flags cannot parse it (before an action, say).
func (f *Flags) PrintHelp() {
	fmt.Fprint(f.help, f.usage)
	f.SetOutput(f.help)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	fmt.Fprint(f.help, f.exitStatus)
}
