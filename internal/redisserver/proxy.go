package redisserver

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP proxy on loopback in front of a server. Normally it
// passes bytes both ways; after LoseNextAnswer, the next bytes the server
// sends back (the answer to a command that has taken effect) are dropped
// and the client's connection is closed: a connection lost after the write
// landed.
type Proxy struct {
	// Addr is where clients connect.
	Addr string

	target string
	l      net.Listener
	lose   atomic.Int32
	lost   atomic.Int32
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// LoseNextAnswer makes the proxy drop the next answer the server sends on
// any connection, and close that connection.
func (p *Proxy) LoseNextAnswer() { p.lose.Add(1) }

// Lost returns how many answers the proxy has dropped.
func (p *Proxy) Lost() int { return int(p.lost.Load()) }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.answers(client, server)
		}()
	}
}

// takeLoss uses up one of the answers to lose, if any is left.
func (p *Proxy) takeLoss() bool {
	for {
		n := p.lose.Load()
		if n <= 0 {
			return false
		}
		if p.lose.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// answers copies the server's answers to the client until one is to be
// lost.
func (p *Proxy) answers(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.takeLoss() {
				p.lost.Add(1)
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
