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
	// handler's type. No redelivery mends the delivered message's body:
	// Typed's decode of it is poison (see IsPoison), permanent by default.
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

// ErrMissingMessageID is what Batch's *MissingMessageIDError unwraps to: a
// failed record had no message ID, so no partial batch response can name
// it.
var ErrMissingMessageID = errors.New("lambdakit: a failed record has no messageId, so the whole batch fails")

// MessageFailure is one record that failed in a batch.
type MessageFailure struct {
	// MessageID is the record's SQS message ID, empty if it had none.
	MessageID string
	// Err is why the record failed.
	Err error
}

// The errors Batch returns to Lambda are types of their own, so that Lambda,
// which reports the type's name as errorType, names them ("AllFailedError",
// "MissingMessageIDError") instead of the standard library's "wrapError" or
// "errorString", and so that callers can take them apart with errors.As.

// AllFailedError is what Batch returns when every record of the batch
// failed (unless BatchOptions.AllowAllFailed is set), so that Lambda counts
// the invocation as failed and the event source mapping backs off.
// errors.Is(err, ErrAllFailed) reports true for it.
type AllFailedError struct {
	// Failures holds every record of the batch, in batch order.
	Failures []MessageFailure
}

// Error implements error.
func (e *AllFailedError) Error() string {
	return fmt.Sprintf("%v (batch of %d)", ErrAllFailed, len(e.Failures))
}

// Unwrap returns ErrAllFailed.
func (e *AllFailedError) Unwrap() error { return ErrAllFailed }

// MissingMessageIDError is what Batch returns when a record without a
// message ID failed. A partial batch response must name every failed record
// by its ID, and Lambda treats an empty one as a failure of the whole
// batch, so Batch fails the invocation plainly instead: the whole batch
// comes back, and the records that did complete are then duplicates.
// errors.Is(err, ErrMissingMessageID) reports true for it.
type MissingMessageIDError struct {
	// Failures holds every failed record of the batch, with and without
	// a message ID, in batch order.
	Failures []MessageFailure
	// Missing is how many of them have no message ID.
	Missing int
}

// Error implements error.
func (e *MissingMessageIDError) Error() string {
	return fmt.Sprintf("%v (%d of %d failed records)", ErrMissingMessageID, e.Missing, len(e.Failures))
}

// Unwrap returns ErrMissingMessageID.
func (e *MissingMessageIDError) Unwrap() error { return ErrMissingMessageID }

// LeaseLostError is a record's failure when the store refused its owner's
// completion or release because the lease was no longer the owner's:
// another owner took the record over after the lease ended (by its clock).
// It wraps the store's error, which wraps ErrLeaseLost. Batch logs it once,
// in the record's failure line, with a LeaseLost count in the Embedded
// Metric Format (namespace lambdakit, dimension prefix).
type LeaseLostError struct {
	// ID is the record's store ID, "<prefix>#<sha256 of key>".
	ID string
	// Prefix is the Idempotent middleware's Prefix.
	Prefix string
	// Op is what the store refused: "complete" or "release".
	Op string
	// Err is the store's error.
	Err error
	// storedID is the record's ID in the store, and keyAt where the key
	// starts in it (ReadableIDs; 0 without them): see StoreError.Error.
	storedID string
	keyAt    int
}

// Error implements error: the store's text, with ReadableIDs naming the
// record by the ID it would have without them, as StoreError.Error does.
func (e *LeaseLostError) Error() string { return hideKeyIn(e.Err.Error(), e.keyAt, e.storedID) }

// Unwrap returns the store's error.
func (e *LeaseLostError) Unwrap() error { return e.Err }
