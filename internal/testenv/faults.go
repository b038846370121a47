package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/smithy-go/middleware"

	"github.com/lambdakit/lambdakit/internal/faultdraw"
)

// Faults makes a fraction of an AWS client's requests fail, for chaos tests
// through the real SDK. Half of the faults strike before the request is
// sent (nothing happened), half after its answer came back (it took effect,
// but the caller sees an error, as after a timeout on a request that went
// through). The errors are retryable, so the SDK's retryer sees them as it
// would see a network failure. Install it with APIOption like Counter; the
// zero value injects nothing. Set Rate and Seed before the first request;
// it is then safe for concurrent use.
type Faults struct {
	// Rate is the fraction of attempts that fail, from 0 to 1.
	Rate float64
	// Seed makes the faults repeatable.
	Seed uint64

	once sync.Once
	d    *faultdraw.Draw
}

// ErrFault is what an injected fault unwraps to.
var ErrFault = errors.New("testenv: injected fault")

type fault struct{ after bool }

func (f fault) Error() string {
	if f.after {
		return ErrFault.Error() + " (the request took effect; its answer was lost)"
	}
	return ErrFault.Error() + " (the request was not sent)"
}

func (f fault) Unwrap() error { return ErrFault }

// RetryableError tells the SDK's retryer to try again, as it would after a
// connection reset.
func (fault) RetryableError() bool { return true }

// Injected is how many faults were injected so far.
func (f *Faults) Injected() int { return f.draw().Injected() }

// draw returns the draw of the faults, made from Rate and Seed at the first
// request.
func (f *Faults) draw() *faultdraw.Draw {
	f.once.Do(func() { f.d = faultdraw.New(f.Rate, f.Seed) })
	return f.d
}

// APIOption adds the fault middleware to an operation's stack, after the
// retry middleware, so that every attempt draws its own fault.
func (f *Faults) APIOption(stack *middleware.Stack) error {
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc(fmt.Sprintf("testenv.Faults/%p", f),
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			before, after := f.draw().Next()
			if before {
				return middleware.FinalizeOutput{}, middleware.Metadata{}, fault{}
			}
			out, md, err := next.HandleFinalize(ctx, in)
			if after && err == nil {
				return middleware.FinalizeOutput{}, md, fault{after: true}
			}
			return out, md, err
		}), "Retry", middleware.After)
}
