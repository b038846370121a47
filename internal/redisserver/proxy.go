package redisserver

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP proxy on loopback in front of a server. Normally it
// passes bytes both ways, counting the commands clients send (what the
// server's own statistics cannot tell apart from the commands scripts
// run) and the writes that carry them; after LoseNextAnswer, the next
// bytes the server sends back (the answer to a command that has taken
// effect) are dropped and the client's connection is closed: a connection
// lost after the write landed.
type Proxy struct {
	// Addr is where clients connect.
	Addr string

	target string
	l      net.Listener
	lose   atomic.Int32
	lost   atomic.Int32
	cmds   atomic.Int64
	writes atomic.Int64
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
			p.commands(server, client)
			server.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.answers(client, server)
		}()
	}
}

// Commands returns how many commands clients have sent through the proxy,
// and in how many reads from their connections: with a client that
// pipelines, several commands travel together, and the reads count the
// round trips, roughly (a large command may take more than one read).
func (p *Proxy) Commands() (commands, reads int64) { return p.cmds.Load(), p.writes.Load() }

// commands copies what the client sends to the server, counting commands
// (RESP arrays) as they complete.
func (p *Proxy) commands(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.writes.Add(1)
			pending = append(pending, buf[:n]...)
			var done int
			done, pending = countCommands(pending)
			p.cmds.Add(int64(done))
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// countCommands counts the whole commands at the start of b (RESP arrays
// of bulk strings, as clients send them) and returns what is left of b
// after them: the start of a command still on its way.
func countCommands(b []byte) (int, []byte) {
	n := 0
	for {
		rest, ok := skipCommand(b)
		if !ok {
			return n, b
		}
		n, b = n+1, rest
	}
}

func skipCommand(b []byte) ([]byte, bool) {
	count, b, ok := header(b, '*')
	if !ok {
		return nil, false
	}
	for range count {
		size, rest, ok := header(b, '$')
		if !ok || len(rest) < size+2 {
			return nil, false
		}
		b = rest[size+2:]
	}
	return b, true
}

// header reads "<kind><number>\r\n" at the start of b.
func header(b []byte, kind byte) (int, []byte, bool) {
	end := bytes.Index(b, []byte("\r\n"))
	if end < 2 || b[0] != kind {
		return 0, nil, false
	}
	v, err := strconv.Atoi(string(b[1:end]))
	if err != nil || v < 0 {
		return 0, nil, false
	}
	return v, b[end+2:], true
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
