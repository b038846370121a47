package chaos

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds the bodies the Gate and the Proxy hold in memory;
// DynamoDB's own limits (a 400 KB item, 100 items in a transaction, 1 MB
// of Scan results) are well below it.
const maxBody = 16 << 20

// Gate is an http.RoundTripper that lets requests through to moto_server
// one at a time, each with its whole answer read, so that moto applies one
// request after another as DynamoDB's atomic conditional writes and
// isolated transactions require. moto serves requests on threads with no
// lock around its DynamoDB backend; see the package documentation.
type Gate struct {
	next   http.RoundTripper
	serial bool

	mu       sync.Mutex
	requests atomic.Int64
	busy     atomic.Int64 // nanoseconds spent inside moto
}

// NewGate returns a Gate over a transport of its own that never uses a
// proxy from the environment. With serial false it lets requests through
// concurrently, to show what moto does then.
func NewGate(serial bool) *Gate {
	return &Gate{
		next: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
		serial: serial,
	}
}

// RoundTrip implements http.RoundTripper. The answer's body is read in
// full before the next request may pass.
func (g *Gate) RoundTrip(req *http.Request) (*http.Response, error) {
	if g.serial {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	start := time.Now()
	defer func() { g.busy.Add(int64(time.Since(start))) }()
	g.requests.Add(1)
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("chaos: reading moto's answer: %w", err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("chaos: moto's answer is over %d bytes", maxBody)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// Requests is how many requests went through.
func (g *Gate) Requests() int64 { return g.requests.Load() }

// Busy is the time requests spent in moto_server, summed.
func (g *Gate) Busy() time.Duration { return time.Duration(g.busy.Load()) }
