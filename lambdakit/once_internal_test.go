package lambdakit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The lease ends the cleanup contexts share: one per distinct end while in
// use, kept unused for the records that follow with the same end, and
// cancelled (their timers stopped) and dropped once a new end comes, so
// that a long-lived process, which sees a new end per batch, keeps no
// more than it uses. An end still in use is never cancelled by another's
// arrival.
func TestLeaseEndsAreSharedAndDropped(t *testing.T) {
	var ends leaseEnds
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	hold := func(end time.Time) *cleanupCtx { return ends.until(context.Background(), end) }
	a, b := hold(base), hold(base)
	if a.end != b.end {
		t.Fatalf("two records with one lease end got two shared ends; want one")
	}
	a.stop()
	if a.Err() == nil || b.Err() != nil {
		t.Errorf("after the first record's stop: its context's Err %v, the second's %v; want the first cancelled, the second alive", a.Err(), b.Err())
	}
	c := hold(base.Add(time.Millisecond))
	if b.Err() != nil || len(ends.ends) != 2 {
		t.Errorf("a new end while the first is in use: %d ends, the first's Err %v; want 2, alive", len(ends.ends), b.Err())
	}
	b.stop()
	b.stop() // a second stop does nothing
	if b.end.refs != 0 {
		t.Errorf("after stop twice: %d uses of the first end; want 0", b.end.refs)
	}
	c.stop()
	for i := range 100 {
		hold(base.Add(time.Duration(i+2) * time.Millisecond)).stop()
	}
	if n := len(ends.ends); n != 1 {
		t.Errorf("after 100 ends, each unused once its record stopped: %d kept; want 1", n)
	}
	if !errors.Is(a.end.ctx.Err(), context.Canceled) || !errors.Is(c.end.ctx.Err(), context.Canceled) {
		t.Errorf("dropped ends: Err %v and %v; want them cancelled, their timers stopped", a.end.ctx.Err(), c.end.ctx.Err())
	}
}
