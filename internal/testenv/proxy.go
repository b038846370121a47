package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy is a real HTTP server on loopback in front of moto_server. It
// forwards every request, except those that a rule picks: those it answers
// itself, with an error of the test's choosing, or never. Point a client at
// it (its BaseEndpoint) to see how the real SDK, over real HTTP, handles
// throttling or a server that hangs, and count at the proxy what the SDK
// really sent, retries included.
//
// Requests are told apart by their operation, the part of the X-Amz-Target
// header after the dot ("PutItem" for "DynamoDB_20120810.PutItem"), which
// DynamoDB and SQS clients send. Safe for concurrent use.
type Proxy struct {
	// URL is the proxy's endpoint, e.g. "http://127.0.0.1:40123".
	URL string

	srv     *httptest.Server
	closing chan struct{}

	mu     sync.Mutex
	rules  []*rule
	counts map[string]int
}

// A rule answers the next n requests for op itself (n < 0: all of them).
type rule struct {
	op     string
	n      int
	status int
	body   string
	hang   bool
	lose   bool // forward first: the request takes effect, its answer is lost
	then   func()
}

// NewProxy starts a proxy to target (a moto_server URL) on a free loopback
// port; it stops when tb ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		tb.Fatalf("testenv: NewProxy(%q): want a http://127.0.0.1 URL", target)
	}
	p := &Proxy{closing: make(chan struct{}), counts: map[string]int{}}
	forward := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		// Straight to moto: no proxy from the environment.
		Transport: &http.Transport{Proxy: nil},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := Operation(r)
		rl := p.take(op)
		if rl == nil {
			forward.ServeHTTP(w, r)
			return
		}
		if rl.lose {
			forward.ServeHTTP(httptest.NewRecorder(), r)
		}
		if rl.then != nil {
			rl.then()
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if rl.hang {
			// Never answer: wait until the client gives up or the
			// proxy closes.
			select {
			case <-r.Context().Done():
			case <-p.closing:
			}
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(rl.status)
		_, _ = io.WriteString(w, rl.body)
	}))
	p.URL = p.srv.URL
	tb.Cleanup(func() {
		close(p.closing)
		p.srv.Close()
	})
	return p
}

// Operation returns the operation a request of an AWS JSON protocol client
// calls: the part of its X-Amz-Target header after the dot.
func Operation(r *http.Request) string {
	target := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(target, '.'); i >= 0 {
		return target[i+1:]
	}
	return target
}

// take counts a request for op and returns the rule that answers it, if
// any, using one of the rule's turns.
func (p *Proxy) take(op string) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[op]++
	for i, rl := range p.rules {
		if rl.op != op {
			continue
		}
		if rl.n > 0 {
			rl.n--
			if rl.n == 0 {
				p.rules = append(p.rules[:i], p.rules[i+1:]...)
			}
		}
		return rl
	}
	return nil
}

// Answer makes the proxy answer the next n requests for op itself, with
// status and body (n < 0: every request for op from now on). Rules apply
// in the order they were added.
func (p *Proxy) Answer(op string, n, status int, body string) {
	p.add(&rule{op: op, n: n, status: status, body: body})
}

// LoseAnswer makes the proxy forward the next n requests for op (n < 0:
// every one), so that they take effect, and answer them with status and
// body instead of moto's answer: a request whose answer was lost on the
// way back.
func (p *Proxy) LoseAnswer(op string, n, status int, body string) {
	p.add(&rule{op: op, n: n, status: status, body: body, lose: true})
}

// LoseAnswerThen is LoseAnswer for the next request for op, with then
// run after that request took effect and before its answer (status and
// body) is sent: for what must happen in between, such as another
// client's request, before the SDK retries.
func (p *Proxy) LoseAnswerThen(op string, status int, body string, then func()) {
	p.add(&rule{op: op, n: 1, status: status, body: body, lose: true, then: then})
}

// Hang makes the proxy never answer the next n requests for op (n < 0:
// every one): it holds them until the client gives up.
func (p *Proxy) Hang(op string, n int) {
	p.add(&rule{op: op, n: n, hang: true})
}

// LoseAnswerAndHang makes the proxy forward the next n requests for op, so
// that they take effect, and then never answer them: a caller that dies
// waiting, after its request took effect.
func (p *Proxy) LoseAnswerAndHang(op string, n int) {
	p.add(&rule{op: op, n: n, hang: true, lose: true})
}

func (p *Proxy) add(rl *rule) {
	if rl.n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, rl)
}

// Count returns how many requests for op reached the proxy, answered by
// moto or by a rule.
func (p *Proxy) Count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[op]
}

// Reset forgets the rules and the counts.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
	clear(p.counts)
}

// DynamoDBError returns the body with which DynamoDB answers an error of
// the given code (such as "ProvisionedThroughputExceededException"), to
// pass to Answer with status 400.
func DynamoDBError(code, message string) string {
	b, _ := json.Marshal(map[string]string{
		"__type":  "com.amazonaws.dynamodb.v20120810#" + code,
		"message": message,
	})
	return string(b)
}

// DynamoDBTransactionCanceled returns the body of a TransactionCanceled
// error whose items were cancelled for the given reason codes, in order
// ("None" for an item without error, "ThrottlingError", ...).
func DynamoDBTransactionCanceled(codes ...string) string {
	type reason struct {
		Code    string `json:"Code"`
		Message string `json:"Message,omitempty"`
	}
	reasons := make([]reason, len(codes))
	for i, c := range codes {
		reasons[i] = reason{Code: c}
		if c != "None" {
			reasons[i].Message = "cancelled by the test proxy: " + c
		}
	}
	b, _ := json.Marshal(map[string]any{
		"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
		"CancellationReasons": reasons,
	})
	return string(b)
}
