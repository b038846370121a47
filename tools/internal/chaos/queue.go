package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// message is one SQS message: a payment's body as one producer sent it.
type message struct {
	id      string
	pay     int // index of the payment
	body    string
	group   string // MessageGroupId: the customer
	dedupID string
	sent    time.Time
	seq     uint64

	reencoded    bool
	valuesDiffer bool // see reencode

	// twin, if set, is a copy of this payment sent by another producer,
	// which arrives the moment this message is received, for another
	// process to take.
	twin *message
	// again is how many times SQS delivers this message once more after
	// it succeeded, as when the deletion failed.
	again int

	// Guarded by the eventSource's mutex.
	state        msgState
	readyAt      time.Time
	avoid        int // a process that must not take it; -1 for none
	receives     int
	firstReceive time.Time
	proc         int    // the process running it, while in flight
	acked        bool   // it succeeded at least once
	lastFailure  string // why its last receive failed, "" after a success
	reported     bool   // the last failure was reported by the function, whose log says why
}

type msgState int

const (
	stateHeld     msgState = iota // a twin waiting for its partner to be received
	stateQueued                   // waiting to be received
	stateInFlight                 // in an invocation
	stateDone                     // deleted after a success
	stateDLQ                      // moved to the dead-letter queue
)

// eventSource plays SQS and the event source mapping: it hands out batches
// of visible messages, hides failed ones for a visibility timeout, and
// moves a message that failed maxReceives receives to the dead-letter
// queue.
type eventSource struct {
	maxReceives int
	visibility  time.Duration
	procs       int

	mu         sync.Mutex
	rng        *rand.Rand
	changed    chan struct{} // closed and replaced on every change
	queue      []*message    // stateQueued, in delivery order
	inflight   int
	dlq        []*message
	deliveries int
	running    map[int]map[int]int // payment → process → its messages in flight there
	// overlaps counts deliveries of a payment that another process was
	// running at that moment, and overlapped the payments concerned.
	overlaps   int
	overlapped map[int]bool
}

func newEventSource(msgs []*message, maxReceives int, visibility time.Duration, procs int, rng *rand.Rand) *eventSource {
	s := &eventSource{
		maxReceives: maxReceives, visibility: visibility, procs: procs, rng: rng, changed: make(chan struct{}),
		running: map[int]map[int]int{}, overlapped: map[int]bool{},
	}
	for _, m := range msgs {
		m.avoid = -1
		if m.state == stateQueued {
			s.queue = append(s.queue, m)
		}
	}
	return s
}

func (s *eventSource) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// take receives up to max visible messages for process proc, waiting for
// some to become visible. It returns nil once every message is done or in
// the dead-letter queue, or when ctx ends.
func (s *eventSource) take(ctx context.Context, proc, max int) []*message {
	for {
		s.mu.Lock()
		now := time.Now()
		var batch, twins []*message
		var next time.Time
		kept := s.queue[:0]
		for _, m := range s.queue {
			if len(batch) < max && !m.readyAt.After(now) && m.avoid != proc {
				batch = append(batch, m)
				continue
			}
			if m.readyAt.After(now) && (next.IsZero() || m.readyAt.Before(next)) {
				next = m.readyAt
			}
			kept = append(kept, m)
		}
		clear(s.queue[len(kept):])
		s.queue = kept
		for _, m := range batch {
			m.state, m.proc = stateInFlight, proc
			for other, n := range s.running[m.pay] {
				if other != proc && n > 0 {
					s.overlaps++
					s.overlapped[m.pay] = true
					break
				}
			}
			if s.running[m.pay] == nil {
				s.running[m.pay] = map[int]int{}
			}
			s.running[m.pay][proc]++
			m.receives++
			if m.firstReceive.IsZero() {
				m.firstReceive = now
			}
			m.avoid = -1
			if t := m.twin; t != nil && t.state == stateHeld {
				t.state, t.readyAt = stateQueued, now
				if s.procs > 1 {
					t.avoid = proc
				}
				twins = append(twins, t)
			}
		}
		if len(twins) > 0 {
			// First in line, so that another process takes them while
			// this one still runs their partners.
			s.queue = append(twins, s.queue...)
			s.broadcastLocked()
		}
		s.inflight += len(batch)
		s.deliveries += len(batch)
		done := len(batch) == 0 && len(s.queue) == 0 && s.inflight == 0
		changed := s.changed
		s.mu.Unlock()
		switch {
		case len(batch) > 0:
			return batch
		case done:
			return nil
		}
		var wake <-chan time.Time
		var timer *time.Timer
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			wake = timer.C
		}
		select {
		case <-changed:
		case <-wake:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// settle ends the receive of a batch: failed maps the message IDs that
// failed to why (reported: the function reported it, and its log says
// why). A failed message becomes visible again after about the visibility
// timeout, or goes to the dead-letter queue after maxReceives receives. A
// message that succeeded is deleted, unless SQS is to deliver it again.
func (s *eventSource) settle(batch []*message, failed map[string]failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, m := range batch {
		s.inflight--
		if s.running[m.pay][m.proc]--; s.running[m.pay][m.proc] == 0 {
			delete(s.running[m.pay], m.proc)
		}
		f, bad := failed[m.id]
		switch {
		case bad:
			m.lastFailure, m.reported = f.reason, f.reported
			if m.receives >= s.maxReceives {
				m.state = stateDLQ
				s.dlq = append(s.dlq, m)
				continue
			}
			s.requeueLocked(m, now)
		case m.again > 0:
			m.acked, m.lastFailure, m.reported = true, "", false
			m.again--
			s.requeueLocked(m, now)
		default:
			m.acked, m.lastFailure, m.reported = true, "", false
			m.state = stateDone
		}
	}
	s.broadcastLocked()
}

// requeueLocked makes m visible again after the visibility timeout,
// jittered by half of it either way.
func (s *eventSource) requeueLocked(m *message, now time.Time) {
	jitter := time.Duration(s.rng.Int64N(int64(s.visibility)+1)) - s.visibility/2
	m.state, m.readyAt = stateQueued, now.Add(s.visibility+jitter)
	s.queue = append(s.queue, m)
}

// redrive moves the dead-letter queue back to the queue, as an operator
// does once the cause is fixed: the messages are visible at once and their
// receive counts start again. It returns how many moved.
func (s *eventSource) redrive() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.dlq)
	now := time.Now()
	for _, m := range s.dlq {
		m.state, m.readyAt, m.receives, m.again, m.avoid = stateQueued, now, 0, 0, -1
		s.queue = append(s.queue, m)
	}
	s.dlq = nil
	s.broadcastLocked()
	return n
}

// counts returns how many messages wait, run and lie in the dead-letter
// queue, and how many records were delivered so far.
func (s *eventSource) counts() (queued, inflight, dlq, deliveries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.inflight, len(s.dlq), s.deliveries
}

// failure is why one record failed.
type failure struct {
	reason   string
	reported bool // by the function itself, in a partial batch response
}
