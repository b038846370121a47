// Package cmdline holds the conventions that the project's commands share,
// the lambdakit CLI's and the payment sample's demo: how they parse their
// flags (Flags), the errors a command returns to say how it ended, and the
// one mapping of those errors to exit statuses (ExitStatus).
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit statuses, shared by the commands so that scripts can rely on them.
// Commands return errors; ExitStatus turns them into these.
//
// The line between 1 and 3 is the same in every command: 1 is what the
// command ran failing (an invocation, a line to publish, a message to
// move, a record that is not there), 3 is the command unable to do its job
// at all, and a queue or table it works on that does not exist or cannot
// be read is always 3.
const (
	ExitOK          = 0   // everything worked
	ExitFailed      = 1   // the command ran, and what it ran failed (a function error, a crash, a line not sent ...)
	ExitUsage       = 2   // bad flags or arguments, or input that cannot be read or is not what it must be
	ExitCannotRun   = 3   // the tool itself could not do its job (a binary that will not start, a queue or table that does not exist or cannot be read ...)
	ExitInterrupted = 130 // SIGINT or SIGTERM, as shells report a SIGINT
)

// The errors a command's Run returns say how it ended, and so the exit
// status: ExitStatus maps them, in one place, and tells them on standard
// error. A command prints its output and its progress itself; the error is
// its last word.

// usageError is a wrong command line (exit status 2): an unknown flag, a
// bad value, a missing argument. It is told in the short form: the error,
// the command's synopsis, and where the full usage is. Flags.UsageError
// makes it.
type usageError struct {
	synopsis string // the first line of the command's usage
	msg      string
}

func (e *usageError) Error() string { return e.msg }

// inputError is an input that cannot be read or is not what it must be (exit
// status 2): an event file, an env file, a template, the file to publish.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// BadInput reports err as an input that cannot be read.
func BadInput(err error) error { return &inputError{err} }

// cannotRunError is the tool failing at its own job (exit status 3): a
// bootstrap that will not start, a queue or table that does not exist or
// cannot be read, a port that is taken.
type cannotRunError struct{ err error }

func (e *cannotRunError) Error() string { return e.err.Error() }
func (e *cannotRunError) Unwrap() error { return e.err }

// CannotRun reports err as the tool failing at its own job.
func CannotRun(err error) error { return &cannotRunError{err} }

// failedError is the command having run, and what it ran having failed
// (exit status 1): a function error, a record not found, a message not
// sent. A nil err means that the command has told the failure already.
type failedError struct{ err error }

func (e *failedError) Error() string {
	if e.err == nil {
		return "failed"
	}
	return e.err.Error()
}

func (e *failedError) Unwrap() error { return e.err }

// Failed reports err as a failure of what the command ran.
func Failed(err error) error { return &failedError{err} }

// ErrFailed is a failure that the command has told already, in its output.
var ErrFailed error = &failedError{}

// interruptedError is the command stopped by SIGINT or SIGTERM before it
// was done (exit status 130, as shells report a SIGINT).
type interruptedError struct{ err error }

func (e *interruptedError) Error() string { return e.err.Error() }
func (e *interruptedError) Unwrap() error { return e.err }

// Interrupted reports err as what the interrupt cut short.
func Interrupted(err error) error { return &interruptedError{err} }

// ErrInterrupted is an interrupt with nothing more to say.
var ErrInterrupted = Interrupted(errors.New("interrupted"))

// ExitStatus is the one place that maps how a command ended to the exit
// status: it tells err on stderr as the command's last word, and returns
// the status err calls for. name starts the command's messages ("lambdakit
// invoke"); help is the command line that prints its full usage
// ("lambdakit invoke -h"), which a usage error points to.
func ExitStatus(stderr io.Writer, name, help string, err error) int {
	var (
		usage       *usageError
		input       *inputError
		cannot      *cannotRunError
		interrupted *interruptedError
		fail        *failedError
	)
	status := ExitFailed
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp): // -h: the command printed its full usage
		return ExitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %s\n%s\nRun '%s' for the flags and details.\n", name, usage.msg, usage.synopsis, help)
		return ExitUsage
	case errors.As(err, &input):
		status = ExitUsage
	case errors.As(err, &cannot):
		status = ExitCannotRun
	case errors.As(err, &interrupted):
		status = ExitInterrupted
	case errors.As(err, &fail) && fail.err == nil:
		return ExitFailed // the command has told the failure
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return status
}
