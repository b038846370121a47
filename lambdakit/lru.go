package lambdakit

import (
	"container/list"
	"sync"
	"time"
)

// lru keeps the most recently completed records of a warm container, so a
// duplicate can be answered without a request. A nil *lru caches nothing.
type lru struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used; values are IdempotencyRecord
	items map[string]*list.Element
}

func newLRU(size int) *lru {
	if size <= 0 {
		return nil
	}
	return &lru{size: size, order: list.New(), items: make(map[string]*list.Element, size)}
}

// get returns the completed record id if it is cached and has not expired.
func (c *lru) get(id string, now time.Time) (IdempotencyRecord, bool) {
	if c == nil {
		return IdempotencyRecord{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[id]
	if !ok {
		return IdempotencyRecord{}, false
	}
	rec := e.Value.(IdempotencyRecord)
	if !rec.Live(now) {
		c.order.Remove(e)
		delete(c.items, id)
		return IdempotencyRecord{}, false
	}
	c.order.MoveToFront(e)
	return rec, true
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
	if e, ok := c.items[rec.ID]; ok {
		e.Value = rec
		c.order.MoveToFront(e)
		return
	}
	c.items[rec.ID] = c.order.PushFront(rec)
	if c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(IdempotencyRecord).ID)
	}
}
