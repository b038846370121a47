package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
)

// GatewayFaults are what the gateway does wrong, as fractions of charge
// requests.
type GatewayFaults struct {
	// Fail answers 503: half before anything happens, half after a new
	// charge was made (the sandbox gateway's own SetFaults).
	Fail float64
	// Slow delays the answer by up to MaxSlow: half before the gateway
	// looks at the request (a caller that gives up meanwhile is not
	// charged), half after the charge was made (the caller may time out
	// on a payment that went through).
	Slow    float64
	MaxSlow time.Duration
}

func (g GatewayFaults) check() error {
	if g.Fail < 0 || g.Fail > 1 || g.Slow < 0 || g.Slow > 1 {
		return fmt.Errorf("chaos: gateway fault rates %v and %v must be in [0, 1]", g.Fail, g.Slow)
	}
	if g.Slow > 0 && g.MaxSlow <= 0 {
		return fmt.Errorf("chaos: slow gateway answers need a positive MaxSlow")
	}
	return nil
}

// gatewayFront is the payment gateway as one function process sees it:
// the shared sandbox gateway, behind slow answers and kills after a
// charge. It also asks the ledger, before each request, whether the
// payment was completed already: the library promises that a completed
// payment never reaches the gateway again.
type gatewayFront struct {
	gw        *gateway.Gateway
	completed func(ctx context.Context, paymentID string) (bool, error)
	ln        net.Listener
	srv       *http.Server

	mu         sync.Mutex
	rng        *rand.Rand
	faults     GatewayFaults
	killCharge float64 // fraction of new charges after which the process dies
	kill       func() bool

	requests    atomic.Int64
	slow        atomic.Int64
	unavailable atomic.Int64 // 503 answers
	killed      atomic.Int64
	checkErrors atomic.Int64
	afterDoneMu sync.Mutex
	afterDone   map[string]int // payment ID → requests after its completion
}

func newGatewayFront(gw *gateway.Gateway, completed func(context.Context, string) (bool, error), faults GatewayFaults, killCharge float64, kill func() bool, seed uint64) (*gatewayFront, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: gateway front: %w", err)
	}
	g := &gatewayFront{
		gw: gw, completed: completed, ln: ln,
		rng:    rand.New(rand.NewPCG(seed, seed^0xbf58476d1ce4e5b9)),
		faults: faults, killCharge: killCharge, kill: kill,
		afterDone: map[string]int{},
	}
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go g.srv.Serve(ln) // returns when close closes the listener
	return g, nil
}

func (g *gatewayFront) url() string { return "http://" + g.ln.Addr().String() }

func (g *gatewayFront) close() {
	_ = g.srv.Close()
}

// quiet turns the faults and kills off, for the redrive.
func (g *gatewayFront) quiet() {
	g.mu.Lock()
	g.faults, g.killCharge = GatewayFaults{}, 0
	g.mu.Unlock()
}

type frontDraw struct {
	slowBefore, slowAfter time.Duration
	killAfterCharge       bool
}

func (g *gatewayFront) draw() frontDraw {
	g.mu.Lock()
	defer g.mu.Unlock()
	var d frontDraw
	if g.rng.Float64() < g.faults.Slow {
		pause := time.Duration(g.rng.Int64N(int64(g.faults.MaxSlow) + 1))
		if g.rng.IntN(2) == 0 {
			d.slowBefore = pause
		} else {
			d.slowAfter = pause
		}
	}
	d.killAfterCharge = g.rng.Float64() < g.killCharge
	return d
}

// ServeHTTP implements http.Handler.
func (g *gatewayFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "chaos: cannot read the request", http.StatusBadRequest)
		return
	}
	var c gateway.Charge
	if json.Unmarshal(body, &c) == nil && c.PaymentID != "" {
		g.checkNotCompleted(r.Context(), c.PaymentID)
	}
	d := g.draw()
	if d.slowBefore > 0 {
		g.slow.Add(1)
		if !sleepCtx(r.Context(), d.slowBefore) {
			return // the caller gave up before the gateway saw the request
		}
	}
	// The gateway answers into a buffer, so that what happens after the
	// charge (a kill, a pause) comes before the caller hears of it.
	rec := &bufferedResponse{header: http.Header{}}
	inner := r.Clone(context.WithoutCancel(r.Context()))
	inner.Body = io.NopCloser(bytes.NewReader(body))
	g.gw.ServeHTTP(rec, inner)
	newCharge := rec.status == http.StatusCreated && rec.header.Get("Idempotent-Replayed") == ""
	if rec.status == http.StatusServiceUnavailable {
		g.unavailable.Add(1)
	}
	if newCharge && d.killAfterCharge && g.kill() {
		g.killed.Add(1)
		resetConn(w)
		return
	}
	if d.slowAfter > 0 {
		g.slow.Add(1)
		if !sleepCtx(r.Context(), d.slowAfter) {
			return // charged, but the caller timed out: the answer is lost
		}
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// checkNotCompleted records a request for a payment whose ledger row, and
// so its completed idempotency record, already exists.
func (g *gatewayFront) checkNotCompleted(ctx context.Context, paymentID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	done, err := g.completed(ctx, paymentID)
	if err != nil {
		g.checkErrors.Add(1)
		return
	}
	if done {
		g.afterDoneMu.Lock()
		g.afterDone[paymentID]++
		g.afterDoneMu.Unlock()
	}
}

func (g *gatewayFront) callsAfterCompletion() map[string]int {
	g.afterDoneMu.Lock()
	defer g.afterDoneMu.Unlock()
	m := make(map[string]int, len(g.afterDone))
	for k, v := range g.afterDone {
		m[k] = v
	}
	return m
}

// sleepCtx pauses for d, or less if ctx ends first; it reports whether the
// whole pause passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// bufferedResponse is an http.ResponseWriter that keeps the answer.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
