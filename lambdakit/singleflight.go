package lambdakit

import "time"

// The idempotency engine suppresses duplicates within one process before
// asking the store: calls with the same record ID wait for the first one
// (the leader) and share its outcome, instead of failing with ErrInProgress
// against their own container's lock. That is a singleflight.
//
// Why not golang.org/x/sync/singleflight: a waiter must check its own
// payload against the leader's record (a key reused with another payload
// is a mismatch, not a duplicate); a waiter must give up when its own
// context ends (its batch's deadline), which x/sync's Do does not allow;
// the leader's panic and runtime.Goexit must become an error for the
// waiters rather than be re-raised in them; a waiter must stop waiting when
// the leader's lease ends; and the common case, no duplicate in flight,
// must cost no channel. It is 40 lines of code.

// A flight is one record being processed in this process; later calls with
// the same ID wait on done and then replay rec or fail with err. The first
// waiter makes done (under the state's mutex), so the common case of no
// duplicate in flight costs no channel. Waiters wait no longer than the
// leader's lease (leaseEnd, on the wall clock): a leader that outlives it,
// in a handler that ignores cancellation, no longer holds the record in
// the store, and must not hold it in this process either.
type flight struct {
	done     chan struct{}
	leaseEnd time.Time
	rec      IdempotencyRecord
	err      error
}

// join registers the caller as the one processing id, with its lease ending
// at leaseEnd, and returns its flight; or returns the flight already
// processing id and a channel that is closed when it ends.
func (e *Once) join(id string, leaseEnd time.Time) (f *flight, wait <-chan struct{}) {
	e.state.mu.Lock()
	defer e.state.mu.Unlock()
	if f, ok := e.state.flights[id]; ok {
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, f.done
	}
	f = &flight{leaseEnd: leaseEnd}
	e.state.flights[id] = f
	return f, nil
}

// leave ends the flight with its outcome and wakes its waiters.
func (e *Once) leave(id string, f *flight, rec IdempotencyRecord, err error) {
	e.state.mu.Lock()
	defer e.state.mu.Unlock()
	f.rec, f.err = rec, err
	e.forget(id, f)
	if f.done != nil {
		close(f.done)
	}
}

// abandon stops routing calls with id to f, whose leader outlived its lease;
// the next call leads a flight of its own.
func (e *Once) abandon(id string, f *flight) {
	e.state.mu.Lock()
	defer e.state.mu.Unlock()
	e.forget(id, f)
}

// forget removes f from the flights, unless a later flight has replaced it.
// The caller holds the state's mutex.
func (e *Once) forget(id string, f *flight) {
	if e.state.flights[id] == f {
		delete(e.state.flights, id)
	}
}
