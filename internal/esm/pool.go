package esm

import (
	"context"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// Pool is an Invoker that spreads invocations over several Invokers, one
// invocation each at a time, as Lambda spreads concurrent batches over
// execution environments. Give Run a Pool of Concurrency Runners for batches
// to run in parallel: a single Runner serves one invocation at a time.
type Pool struct {
	free chan Invoker
}

// NewPool returns a Pool of invokers. It needs at least one.
func NewPool(invokers ...Invoker) *Pool {
	p := &Pool{free: make(chan Invoker, len(invokers))}
	for _, inv := range invokers {
		p.free <- inv
	}
	return p
}

// Capacity is how many invocations the Pool serves at once: one per
// invoker.
func (p *Pool) Capacity() int { return cap(p.free) }

// Invoke waits for a free invoker, or for ctx to end, and runs event on it.
func (p *Pool) Invoke(ctx context.Context, event []byte, optFns ...func(*runtimeapi.InvokeOptions)) (runtimeapi.Result, error) {
	var inv Invoker
	select {
	case inv = <-p.free:
	case <-ctx.Done():
		return runtimeapi.Result{}, ctx.Err()
	}
	defer func() { p.free <- inv }()
	return inv.Invoke(ctx, event, optFns...)
}
