package esm

import "sync"

// groupLocks keeps two batches with a FIFO message group in common from
// running at once. SQS itself withholds a group's messages while an earlier
// one is in flight, but only until its visibility timeout: a batch that
// outlives it finds its group handed out again, and Lambda's guarantee of one
// batch per group at a time must then come from here.
type groupLocks struct {
	mu   sync.Mutex
	cond *sync.Cond
	held map[string]bool
}

func newGroupLocks() *groupLocks {
	g := &groupLocks{held: make(map[string]bool)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// acquire waits until none of groups is held, then holds them all. Taking
// the whole set at once, never one by one, is what rules out a deadlock
// between two batches.
func (g *groupLocks) acquire(groups []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.anyHeld(groups) {
		g.cond.Wait()
	}
	for _, id := range groups {
		g.held[id] = true
	}
}

func (g *groupLocks) anyHeld(groups []string) bool {
	for _, id := range groups {
		if g.held[id] {
			return true
		}
	}
	return false
}

// release lets go of groups, which acquire took.
func (g *groupLocks) release(groups []string) {
	g.mu.Lock()
	for _, id := range groups {
		delete(g.held, id)
	}
	g.mu.Unlock()
	g.cond.Broadcast()
}
