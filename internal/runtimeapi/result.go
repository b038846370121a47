package runtimeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrClosed is returned by Invoke on a Server or Runner that was closed
// before the invocation ended.
var ErrClosed = errors.New("runtimeapi: closed")

// Outcome says how an invocation ended. The zero value, OutcomeNone, is never
// the outcome of a Result returned with a nil error.
type Outcome int

// The outcomes an invocation can have. All but OutcomeSuccess are failures;
// they are told apart because they call for different fixes (a bug in the
// handler, a broken start-up, a process that died, a timeout too short).
const (
	// OutcomeNone marks a Result that holds no outcome, such as the one
	// returned with an error.
	OutcomeNone Outcome = iota
	// OutcomeSuccess means the runtime posted a response.
	OutcomeSuccess
	// OutcomeFunctionError means the runtime posted an invocation error:
	// the handler returned an error or panicked.
	OutcomeFunctionError
	// OutcomeInitError means the runtime never became ready for an event:
	// it posted an init error, exited before asking for an event, or took
	// longer than the init timeout.
	OutcomeInitError
	// OutcomeCrash means the process exited while an event was in flight,
	// without answering it.
	OutcomeCrash
	// OutcomeTimeout means no answer came before the deadline.
	OutcomeTimeout
)

// String returns the outcome in words, for messages.
func (o Outcome) String() string {
	switch o {
	case OutcomeNone:
		return "none"
	case OutcomeSuccess:
		return "success"
	case OutcomeFunctionError:
		return "function error"
	case OutcomeInitError:
		return "init error"
	case OutcomeCrash:
		return "crash"
	case OutcomeTimeout:
		return "timeout"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// FunctionError is the error document of the Lambda Runtime API, the body a
// runtime posts to the error endpoints and the payload Lambda returns to the
// caller of a failed invocation. Lambda's own errors (timeouts, crashes) use
// the same shape, with types such as "Sandbox.Timedout" and
// "Runtime.ExitError", so that a caller handles every failure alike.
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
	// StackTrace is kept raw: runtimes disagree on its shape (aws-lambda-go
	// posts frames as objects, Python posts strings).
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
}

// Error returns the type and message, so that a FunctionError can travel as
// an error.
func (e *FunctionError) Error() string {
	if e.Type == "" {
		return e.Message
	}
	return e.Type + ": " + e.Message
}

// Result is what one invocation produced.
type Result struct {
	// RequestID is the invocation's request ID, as the function saw it in
	// Lambda-Runtime-Aws-Request-Id (for an init failure, the ID the event
	// would have had).
	RequestID string
	// Outcome says how the invocation ended.
	Outcome Outcome
	// Payload is what Lambda would return to the caller: the response body
	// on success, otherwise the error document (the one the runtime posted,
	// byte for byte, or one made from Error).
	Payload []byte
	// Error is the failure, nil on success.
	Error *FunctionError
	// ExitCode is the process's exit code when it exited during init or
	// during the invocation, -1 if a signal ended it, 0 otherwise. Only a
	// Runner sets it.
	ExitCode int
	// Duration runs from the moment the runtime received the event to the
	// answer (the timeout, for a timeout).
	Duration time.Duration
	// InitDuration is how long a new process took to become ready, when
	// this invocation started one (a cold start); 0 on a warm process.
	InitDuration time.Duration

	deadline time.Time
}

// newFailure builds a Result for a failure that Lambda itself reports (not
// the function), with the payload Lambda would return.
func newFailure(id string, outcome Outcome, errType, format string, args ...any) Result {
	fe := &FunctionError{Type: errType, Message: fmt.Sprintf("RequestId: %s Error: ", id) + fmt.Sprintf(format, args...)}
	return Result{RequestID: id, Outcome: outcome, Payload: mustMarshal(fe), Error: fe}
}

// parseFunctionError reads an error document posted by a runtime. A body
// that is not such a document is kept as the message, so that nothing the
// function said is lost; errType (the Lambda-Runtime-Function-Error-Type
// header) fills in a missing type.
func parseFunctionError(body []byte, errType string) *FunctionError {
	var fe FunctionError
	if err := json.Unmarshal(body, &fe); err != nil || (fe.Type == "" && fe.Message == "") {
		fe = FunctionError{Message: string(body)}
	}
	if fe.Type == "" {
		fe.Type = errType
	}
	if fe.Type == "" {
		fe.Type = "Unhandled"
	}
	return &fe
}

// mustMarshal encodes v, which only holds strings and valid raw JSON, so
// encoding cannot fail.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"errorType":"Runtime.SerializationError","errorMessage":"cannot encode error"}`)
	}
	return b
}
