package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what the Proxy does to one request.
type Fault int

// The faults, in the order Proxy draws them. The first three leave moto
// untouched; the last two strike after moto applied the request, so the
// write happened though the caller sees an error.
const (
	// FaultNone forwards the request and its answer.
	FaultNone Fault = iota
	// FaultServerError answers 500 InternalServerError without forwarding.
	FaultServerError
	// FaultThrottle answers 400 ProvisionedThroughputExceededException, a
	// throttling error to the SDK, without forwarding.
	FaultThrottle
	// FaultReset resets the connection without forwarding.
	FaultReset
	// FaultDelay forwards the request after a pause.
	FaultDelay
	// FaultLostError forwards the request and answers 500 instead of
	// moto's answer.
	FaultLostError
	// FaultLostReset forwards the request and resets the connection
	// instead of answering.
	FaultLostReset
	numFaults
)

// String names the fault, for reports.
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultServerError:
		return "500 before moto"
	case FaultThrottle:
		return "throttled before moto"
	case FaultReset:
		return "reset before moto"
	case FaultDelay:
		return "delayed"
	case FaultLostError:
		return "500 after moto applied it"
	case FaultLostReset:
		return "reset after moto applied it"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// DynamoFaults are the fractions of requests that get each fault; their
// sum must not exceed 1.
type DynamoFaults struct {
	ServerError float64
	Throttle    float64
	Reset       float64
	Delay       float64
	LostError   float64
	LostReset   float64
	// MaxDelay bounds the pause of FaultDelay, drawn uniformly up to it.
	MaxDelay time.Duration
}

func (d DynamoFaults) rates() [numFaults]float64 {
	return [numFaults]float64{0, d.ServerError, d.Throttle, d.Reset, d.Delay, d.LostError, d.LostReset}
}

func (d DynamoFaults) check() error {
	sum := 0.0
	for f, r := range d.rates() {
		if r < 0 || r > 1 {
			return fmt.Errorf("chaos: DynamoDB fault %v rate %v is outside [0, 1]", Fault(f), r)
		}
		sum += r
	}
	if sum > 1 {
		return fmt.Errorf("chaos: DynamoDB fault rates add up to %v, over 1", sum)
	}
	if d.Delay > 0 && d.MaxDelay <= 0 {
		return errors.New("chaos: DynamoDB delay faults need a positive MaxDelay")
	}
	return nil
}

// KillPoint says whether the process that sent a request dies with it:
// Before means it dies before the request reaches moto, After that it
// dies once moto applied it, before the answer reaches it.
type KillPoint struct{ Before, After bool }

// Proxy is an HTTP reverse proxy on a loopback port in front of one
// DynamoDB endpoint, which injects faults into a chosen fraction of the
// requests, drawn from a seeded generator. Point a client at URL.
type Proxy struct {
	target *url.URL
	rt     http.RoundTripper
	ln     net.Listener
	srv    *http.Server

	mu     sync.Mutex
	rng    *rand.Rand
	faults DynamoFaults
	kill   func(op string) KillPoint // may be nil
	onKill func(KillPoint)

	requests atomic.Int64
	counts   [numFaults]atomic.Int64
	killed   atomic.Int64
	pending  sync.WaitGroup // forwards in progress
}

// NewProxy starts a proxy on 127.0.0.1 in front of target (moto_server's
// URL), forwarding through rt (a Gate).
func NewProxy(target string, rt http.RoundTripper, faults DynamoFaults, seed uint64) (*Proxy, error) {
	if err := faults.check(); err != nil {
		return nil, err
	}
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("chaos: proxy target %q is not an http URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy: %w", err)
	}
	p := &Proxy{target: u, rt: rt, ln: ln, faults: faults, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln) // returns when Close closes the listener
	return p, nil
}

// URL is where clients reach the proxy.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetFaults replaces the fault rates, for instance with none.
func (p *Proxy) SetFaults(faults DynamoFaults) error {
	if err := faults.check(); err != nil {
		return err
	}
	p.mu.Lock()
	p.faults = faults
	p.mu.Unlock()
	return nil
}

// SetKill installs the function that decides, per request, whether the
// sender dies with it (op is the DynamoDB operation, such as "PutItem"),
// and the one that kills it. Nil turns killing off.
func (p *Proxy) SetKill(decide func(op string) KillPoint, kill func(KillPoint)) {
	p.mu.Lock()
	p.kill, p.onKill = decide, kill
	p.mu.Unlock()
}

// Injected returns how many requests got each fault.
func (p *Proxy) Injected() map[Fault]int64 {
	m := map[Fault]int64{}
	for f := FaultServerError; f < numFaults; f++ {
		if n := p.counts[f].Load(); n > 0 {
			m[f] = n
		}
	}
	return m
}

// Requests is how many requests reached the proxy.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Killed is how many times a request killed its sender.
func (p *Proxy) Killed() int64 { return p.killed.Load() }

// Close stops the proxy and waits for forwards in progress.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.pending.Wait()
	return err
}

func (p *Proxy) draw(op string) (Fault, time.Duration, KillPoint, func(KillPoint)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, x := FaultNone, p.rng.Float64()
	for i, r := range p.faults.rates() {
		if x < r {
			f = Fault(i)
			break
		}
		x -= r
	}
	var delay time.Duration
	if f == FaultDelay {
		delay = time.Duration(p.rng.Int64N(int64(p.faults.MaxDelay) + 1))
	}
	var k KillPoint
	if p.kill != nil {
		k = p.kill(op)
	}
	return f, delay, k, p.onKill
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "chaos: cannot read the request", http.StatusBadRequest)
		return
	}
	// "DynamoDB_20120810.PutItem"
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	fault, delay, kill, onKill := p.draw(op)
	if kill.Before {
		p.killed.Add(1)
		if onKill != nil {
			onKill(kill)
		}
		resetConn(w)
		return
	}
	p.counts[fault].Add(1)
	switch fault {
	case FaultServerError:
		writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the chaos proxy)")
		return
	case FaultThrottle:
		writeDynamoError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded (injected by the chaos proxy)")
		return
	case FaultReset:
		resetConn(w)
		return
	case FaultDelay:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the caller gave up; nothing reached moto
		}
	}
	resp, err := p.forward(r, body)
	if err != nil {
		writeDynamoError(w, http.StatusBadGateway, "ChaosProxyError", err.Error())
		return
	}
	if kill.After {
		p.killed.Add(1)
		if onKill != nil {
			onKill(kill)
		}
		resetConn(w)
		return
	}
	switch fault {
	case FaultLostError:
		writeDynamoError(w, http.StatusInternalServerError, "InternalServerError", "Internal server error (injected by the chaos proxy after the request took effect)")
		return
	case FaultLostReset:
		resetConn(w)
		return
	}
	for k, v := range resp.Header {
		if !hopByHop(k) {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// forward sends the request to moto. Once started it runs to the end even
// if the caller hangs up (a process killed meanwhile): a request that left
// the caller may still be applied, as on the real wire.
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	p.pending.Add(1)
	defer p.pending.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 60*time.Second)
	defer cancel()
	u := *p.target
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range r.Header {
		if !hopByHop(k) {
			out.Header[k] = v
		}
	}
	resp, err := p.rt.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("chaos: forwarding to moto: %w", err)
	}
	return resp, nil
}

func hopByHop(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length":
		return true
	}
	return false
}

// writeDynamoError answers the way DynamoDB does: the error type in
// X-Amzn-ErrorType and, with its namespace, in the body's __type, which is
// where the SDK reads the code its retryer classifies (throttling codes
// such as ProvisionedThroughputExceededException, and 5xx statuses, are
// retried).
func writeDynamoError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#" + code, "message": msg})
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-ErrorType", code)
	// DynamoDB sends the CRC32 of every body, and the SDK checks it.
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// resetConn closes the client's connection with a TCP reset, which the SDK
// sees as "connection reset by peer", a retryable connection error.
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}
