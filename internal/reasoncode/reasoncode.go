// Package reasoncode names why a record failed, as lambdakit's per-record
// log lines (reasonCode) and metrics line, and lambdakitotel's spans
// (lambdakit.idempotency.reason, error.type), say it: one list, so that the
// three cannot drift apart.
package reasoncode

// The reasons a record fails for.
const (
	InProgress      = "InProgress"      // another invocation holds its key
	PayloadMismatch = "PayloadMismatch" // its key was used with another payload
	NoKey           = "NoKey"           // no valid idempotency key
	HandlerError    = "HandlerError"    // the handler failed
	Deadline        = "Deadline"        // the invocation's deadline came first
	LeaseLost       = "LeaseLost"       // its lease was taken over
	StoreError      = "StoreError"      // the idempotency store failed
	Skipped         = "Skipped"         // not attempted after an earlier failure in its FIFO group
	Permanent       = "Permanent"       // failed for good and sent to the dead-letter queue
)

// All lists the reasons in the order the metrics line writes them.
var All = []string{InProgress, PayloadMismatch, NoKey, HandlerError, Deadline, LeaseLost, StoreError, Skipped, Permanent}
