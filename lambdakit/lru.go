package lambdakit

import (
	"sync"
	"time"
)

// lru keeps the most recently completed records of a warm container, so a
// duplicate can be answered without a request. A nil *lru caches nothing.
//
// Its list is its own rather than container/list's: a record is kept in
// its node by value, not boxed in an interface, and once the cache is full
// the node of the record it drops takes the new one, so that a put, which
// follows every completion, allocates nothing in a container that has run
// a while.
type lru struct {
	mu    sync.Mutex
	size  int
	root  lruNode // root.next is the most recently used node, root.prev the least
	items map[string]*lruNode
}

type lruNode struct {
	rec        IdempotencyRecord
	prev, next *lruNode
}

func newLRU(size int) *lru {
	if size <= 0 {
		return nil
	}
	c := &lru{size: size, items: make(map[string]*lruNode, size)}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// unlink takes n out of the list.
func (c *lru) unlink(n *lruNode) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

// pushFront puts n, which is in no list, at the front.
func (c *lru) pushFront(n *lruNode) {
	n.prev, n.next = &c.root, c.root.next
	c.root.next.prev = n
	c.root.next = n
}

// get returns the completed record id if it is cached and has not expired.
func (c *lru) get(id string, now time.Time) (IdempotencyRecord, bool) {
	if c == nil {
		return IdempotencyRecord{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.items[id]
	if !ok {
		return IdempotencyRecord{}, false
	}
	if !n.rec.Live(now) {
		c.unlink(n)
		delete(c.items, id)
		return IdempotencyRecord{}, false
	}
	c.unlink(n)
	c.pushFront(n)
	return n.rec, true
}

// put caches rec if it is completed, as the most recently used record.
// rec.Data is kept as it is, not copied: every caller passes a record
// read from the store or one whose result it has copied from the
// handler's buffer already (commit, runFirst), and nothing writes to a
// cached result (replay hands out copies).
func (c *lru) put(rec IdempotencyRecord) {
	if c == nil || rec.Status != StatusCompleted {
		return
	}
	rec.Staged = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.items[rec.ID]; ok {
		n.rec = rec
		c.unlink(n)
		c.pushFront(n)
		return
	}
	var n *lruNode
	if len(c.items) < c.size {
		n = &lruNode{}
	} else {
		// Full: the least recently used record makes room, and its
		// node carries the new one.
		n = c.root.prev
		c.unlink(n)
		delete(c.items, n.rec.ID)
	}
	n.rec = rec
	c.pushFront(n)
	c.items[rec.ID] = n
}
