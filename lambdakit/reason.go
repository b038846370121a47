package lambdakit

import (
	"context"
	"errors"
)

// Reason names why a record failed. Batch writes it in a failed record's
// log line (reasonCode) and counts it in the metrics line (Failed<Reason>),
// and lambdakitotel sets it on the record's span: all three take it from
// ReasonOf, one rule. The span sees the error the handler chain returned;
// the log and metrics see the batch's outcome, which may go further: a
// poison message Batch sends to the dead-letter queue is Permanent in the
// log and the metrics, and on the span the reason its error gave (NoKey,
// say), since the span ends before Batch decides.
type Reason string

// The reasons a record fails for, in the order ReasonOf tests them.
const (
	ReasonSkipped         Reason = "Skipped"         // not attempted after an earlier failure in its FIFO group
	ReasonAfterEffect     Reason = "AfterEffect"     // failed after its effect (ErrFailedAfterEffect): reconcile
	ReasonPermanent       Reason = "Permanent"       // marked permanent (Permanent); sent to the dead-letter queue where one is set
	ReasonLeaseLost       Reason = "LeaseLost"       // its lease was taken over
	ReasonInProgress      Reason = "InProgress"      // another invocation holds its key
	ReasonPayloadMismatch Reason = "PayloadMismatch" // its key was used with another payload
	ReasonNoKey           Reason = "NoKey"           // no valid idempotency key
	ReasonDeadline        Reason = "Deadline"        // the invocation's deadline came first
	ReasonStoreError      Reason = "StoreError"      // the idempotency store failed
	ReasonHandlerError    Reason = "HandlerError"    // the handler failed
)

// Reasons returns every Reason, in the order Batch's metrics line writes
// them.
func Reasons() []Reason {
	return []Reason{ReasonInProgress, ReasonPayloadMismatch, ReasonNoKey, ReasonHandlerError, ReasonDeadline,
		ReasonLeaseLost, ReasonStoreError, ReasonSkipped, ReasonPermanent, ReasonAfterEffect}
}

// ErrCancelledAtDeadline marks the error of a record that failed after the
// batch's deadline guard cancelled its context: Batch wraps such errors with
// it, and ReasonOf counts them as ReasonDeadline unless a more specific
// reason applies.
var ErrCancelledAtDeadline = errors.New("lambdakit: cancelled at the deadline guard")

// ReasonOf names why a record failed with err. The order matters: a
// failure after the effect counts as such, though it is permanent too
// (someone must reconcile it); a permanent failure counts as permanent
// whatever else it wraps; and a lost lease during cleanup may come joined
// with the handler's error.
func ReasonOf(err error) Reason {
	var storeErr *StoreError
	switch {
	case errors.Is(err, ErrSkipped):
		return ReasonSkipped
	case errors.Is(err, ErrFailedAfterEffect):
		return ReasonAfterEffect
	case errors.Is(err, ErrPermanent):
		return ReasonPermanent
	case errors.Is(err, ErrLeaseLost):
		return ReasonLeaseLost
	case errors.Is(err, ErrInProgress):
		return ReasonInProgress
	case errors.Is(err, ErrPayloadMismatch):
		return ReasonPayloadMismatch
	case errors.Is(err, ErrNoKey), errors.Is(err, ErrInvalidKey):
		return ReasonNoKey
	case errors.Is(err, ErrNotStarted), errors.Is(err, ErrStillRunning),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrCancelledAtDeadline):
		return ReasonDeadline
	case errors.As(err, &storeErr):
		return ReasonStoreError
	default:
		return ReasonHandlerError
	}
}
