package chaos

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

func newTestSource(msgs []*message, maxReceives int, visibility time.Duration, procs int) *eventSource {
	return newEventSource(msgs, maxReceives, visibility, procs, rand.New(rand.NewPCG(1, 2)))
}

func takeNow(t *testing.T, s *eventSource, proc, n int) []*message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.take(ctx, proc, n)
}

func ids(batch []*message) []string {
	var out []string
	for _, m := range batch {
		out = append(out, m.id)
	}
	return out
}

// A failed message comes back after the visibility timeout with its
// receive count up, goes to the dead-letter queue after maxReceives, and
// a redrive brings it back with a fresh count.
func TestEventSourceRetriesThenDLQ(t *testing.T) {
	m := &message{id: "m", state: stateQueued}
	s := newTestSource([]*message{m}, 2, 20*time.Millisecond, 1)
	for receive := 1; receive <= 2; receive++ {
		b := takeNow(t, s, 0, 10)
		if len(b) != 1 || m.receives != receive {
			t.Fatalf("receive %d: got %v, receives %d", receive, ids(b), m.receives)
		}
		s.settle(b, map[string]failure{"m": {reason: "boom"}})
	}
	if _, _, dlq, _ := s.counts(); dlq != 1 || m.state != stateDLQ {
		t.Fatalf("after 2 failed receives: dlq %d, state %v; want the message in the DLQ", dlq, m.state)
	}
	if b := takeNow(t, s, 0, 10); b != nil {
		t.Fatalf("take with only the DLQ left = %v; want nil (done)", ids(b))
	}
	if n := s.redrive(); n != 1 {
		t.Fatalf("redrive = %d; want 1", n)
	}
	b := takeNow(t, s, 0, 10)
	if len(b) != 1 || m.receives != 1 {
		t.Fatalf("after redrive: got %v, receives %d; want the message with receive count 1", ids(b), m.receives)
	}
	s.settle(b, nil)
	if m.state != stateDone || !m.acked {
		t.Errorf("state %v, acked %v; want done", m.state, m.acked)
	}
}

// A message to be delivered again after its success comes back as the same
// message, and counts as acknowledged.
func TestEventSourceDeliversAgainAfterSuccess(t *testing.T) {
	m := &message{id: "m", state: stateQueued, again: 1}
	s := newTestSource([]*message{m}, 5, 10*time.Millisecond, 1)
	s.settle(takeNow(t, s, 0, 10), nil)
	b := takeNow(t, s, 0, 10)
	if len(b) != 1 || b[0] != m || m.receives != 2 || !m.acked {
		t.Fatalf("second delivery %v, receives %d, acked %v; want m again, received twice, acked", ids(b), m.receives, m.acked)
	}
	s.settle(b, nil)
	if b := takeNow(t, s, 0, 10); b != nil {
		t.Errorf("third take = %v; want nil", ids(b))
	}
}

// A twin is released when its partner is received, first in line, and not
// for the partner's process; taking it counts as a concurrent delivery.
func TestEventSourceTwin(t *testing.T) {
	twin := &message{id: "twin", pay: 1, state: stateHeld}
	orig := &message{id: "orig", pay: 1, state: stateQueued, twin: twin}
	other := &message{id: "other", pay: 2, state: stateQueued}
	s := newTestSource([]*message{orig, other, twin}, 5, time.Second, 2)
	if b := takeNow(t, s, 0, 1); len(b) != 1 || b[0] != orig {
		t.Fatalf("first take = %v; want orig", ids(b))
	}
	if b := takeNow(t, s, 0, 1); len(b) != 1 || b[0] != other {
		t.Fatalf("process 0's next take = %v; want other, not the twin", ids(b))
	}
	b := takeNow(t, s, 1, 10)
	if len(b) != 1 || b[0] != twin {
		t.Fatalf("process 1's take = %v; want the twin", ids(b))
	}
	if s.overlaps != 1 || !s.overlapped[1] {
		t.Errorf("overlaps %d, overlapped %v; want the twin counted", s.overlaps, s.overlapped)
	}
}

func TestEventSourceTakeEndsWithContext(t *testing.T) {
	m := &message{id: "m", state: stateQueued}
	s := newTestSource([]*message{m}, 5, time.Hour, 1)
	b := takeNow(t, s, 0, 10)
	s.settle(b, map[string]failure{"m": {reason: "x"}}) // hidden for about an hour
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if b := s.take(ctx, 0, 10); b != nil {
		t.Errorf("take = %v; want nil once the context ends", ids(b))
	}
}
