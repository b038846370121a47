package bench

import (
	"net"
	"net/http"
	"sync"
)

// ConnCounter counts the client connections of an http.Server (set its
// ConnState to Track): how many are open, the most open at once since the
// last Reset, and how many were opened since. The proxy in front of moto
// has one, so that a row shows how many connections the function held to
// DynamoDB, and the gateway another. Safe for concurrent use.
type ConnCounter struct {
	mu                 sync.Mutex
	open, peak, opened int
}

// ConnStats is what a ConnCounter counted since its last Reset.
type ConnStats struct {
	// MaxOpen is the most connections open at once, those already open
	// at the Reset included.
	MaxOpen int
	// Opened is how many connections were opened.
	Opened int
}

// Track is an http.Server's ConnState hook.
func (c *ConnCounter) Track(_ net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.open++
		c.opened++
		c.peak = max(c.peak, c.open)
	case http.StateClosed, http.StateHijacked:
		c.open--
	}
}

// Reset starts a new count: the peak is the connections open now, and
// none opened.
func (c *ConnCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peak, c.opened = c.open, 0
}

// Stats returns what was counted since the last Reset.
func (c *ConnCounter) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStats{MaxOpen: c.peak, Opened: c.opened}
}
