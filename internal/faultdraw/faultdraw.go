// Package faultdraw decides which calls an injected fault strikes, for the
// chaos tests and the sandbox gateway: a fraction of the calls, chosen at
// random but repeatably for a seed, half of them before the call does
// anything and half after it took effect, when only its answer is lost (as
// after a timeout on a request that went through). The second kind is the
// one that idempotency exists for.
package faultdraw

import (
	"math/rand/v2"
	"sync"
)

// Draw draws the faults of one fault injector. A nil *Draw never strikes.
// Safe for concurrent use.
type Draw struct {
	mu       sync.Mutex
	rate     float64
	rng      *rand.Rand
	injected int
}

// New returns a Draw that strikes a fraction rate (0 to 1) of the calls,
// in the same sequence for the same seed.
func New(rate float64, seed uint64) *Draw {
	return &Draw{rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Next draws the fault of the next call: before, it must fail without
// doing anything; after, it must do its work and then fail; neither, it
// runs as usual.
func (d *Draw) Next() (before, after bool) {
	if d == nil {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rng.Float64() >= d.rate {
		return false, false
	}
	d.injected++
	if d.rng.IntN(2) == 0 {
		return true, false
	}
	return false, true
}

// Injected is how many faults Next has drawn.
func (d *Draw) Injected() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.injected
}
