package testenv

import (
	"net"
	"time"
)

// Reachable reports whether something accepts TCP connections on addr, a
// loopback address (127.0.0.0/8) in this project's tests, within 2 seconds.
func Reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
