package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/aws/smithy-go/middleware"
)

// Faults makes a fraction of an AWS client's requests fail, for chaos tests
// through the real SDK. Half of the faults strike before the request is
// sent (nothing happened), half after its answer came back (it took effect,
// but the caller sees an error, as after a timeout on a request that went
// through). The errors are retryable, so the SDK's retryer sees them as it
// would see a network failure. Install it with APIOption like Counter; the
// zero value injects nothing. Safe for concurrent use.
type Faults struct {
	// Rate is the fraction of attempts that fail, from 0 to 1.
	Rate float64
	// Seed makes the faults repeatable.
	Seed uint64

	mu       sync.Mutex
	rng      *rand.Rand
	injected int
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
func (f *Faults) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

func (f *Faults) draw() (before, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng == nil {
		f.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x5bd1e995))
	}
	if f.rng.Float64() >= f.Rate {
		return false, false
	}
	f.injected++
	if f.rng.IntN(2) == 0 {
		return true, false
	}
	return false, true
}

// APIOption adds the fault middleware to an operation's stack, after the
// retry middleware, so that every attempt draws its own fault.
func (f *Faults) APIOption(stack *middleware.Stack) error {
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc(fmt.Sprintf("testenv.Faults/%p", f),
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			before, after := f.draw()
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
