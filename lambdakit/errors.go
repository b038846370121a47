package lambdakit

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Errors the batch adapter reports for records it did not run to the end.
var (
	// ErrNotStarted means the record was not started before the batch's
	// deadline guard stopped starting records.
	ErrNotStarted = errors.New("lambdakit: not started before the invocation deadline")
	// ErrStillRunning means the record's handler had not returned when the
	// batch had to answer before the invocation deadline.
	ErrStillRunning = errors.New("lambdakit: still running at the invocation deadline")
	// ErrSkipped means the record was not attempted because an earlier
	// record of its FIFO message group (or, in strict mode, of the batch)
	// failed; it is reported failed so that order is kept.
	ErrSkipped = errors.New("lambdakit: not attempted after an earlier failure in its FIFO group")
	// ErrAllFailed is returned by the batch handler when every record
	// failed, so that the event source mapping backs off.
	ErrAllFailed = errors.New("lambdakit: every record in the batch failed")
	// ErrHandlerExited means the handler called runtime.Goexit (as
	// testing's FailNow does) instead of returning. The record fails and
	// its lock is released, as after a panic.
	ErrHandlerExited = errors.New("lambdakit: handler called runtime.Goexit")
	// ErrDecode means a message body could not be decoded into the
	// handler's type.
	ErrDecode = errors.New("lambdakit: cannot decode message body")
)

// PanicError is a panic in a handler, recovered and turned into that
// record's failure.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the goroutine's stack where it was recovered
}

func newPanicError(v any) *PanicError {
	return &PanicError{Value: v, Stack: debug.Stack()}
}

// Error implements error.
func (e *PanicError) Error() string {
	return fmt.Sprintf("lambdakit: handler panicked: %v", e.Value)
}

// Unwrap returns the panic value if it was an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
