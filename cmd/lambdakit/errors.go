package main

import "errors"

// The errors a command's Run returns say how it ended, and so the exit
// status: exitStatus in main.go maps them, in one place, and tells them on
// standard error. A command prints its output and its progress itself; the
// error is its last word.

// usageError is a wrong command line (exit status 2): an unknown flag, a
// bad value, a missing argument. It is told in the short form: the error,
// the command's synopsis, and where the full usage is. cmdFlags.usageError
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

// badInput reports err as an input that cannot be read.
func badInput(err error) error { return &inputError{err} }

// cannotRunError is the tool failing at its own job (exit status 3): a
// bootstrap that will not start, a queue or table that cannot be read, a
// port that is taken.
type cannotRunError struct{ err error }

func (e *cannotRunError) Error() string { return e.err.Error() }
func (e *cannotRunError) Unwrap() error { return e.err }

// cannotRun reports err as the tool failing at its own job.
func cannotRun(err error) error { return &cannotRunError{err} }

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

// failed reports err as a failure of what the command ran.
func failed(err error) error { return &failedError{err} }

// errFailed is a failure that the command has told already, in its output.
var errFailed error = &failedError{}

// interruptedError is the command stopped by SIGINT or SIGTERM before it
// was done (exit status 130, as shells report a SIGINT).
type interruptedError struct{ err error }

func (e *interruptedError) Error() string { return e.err.Error() }
func (e *interruptedError) Unwrap() error { return e.err }

// interrupted reports err as what the interrupt cut short.
func interrupted(err error) error { return &interruptedError{err} }

// errInterrupted is an interrupt with nothing more to say.
var errInterrupted = interrupted(errors.New("interrupted"))
