package bench

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Proxy is a loopback HTTP server in front of moto_server that shows every
// DynamoDB request, and its answer, to a Meter before handing the answer
// back unchanged. Functions under measurement get its URL as their
// endpoint, so it counts what they really sent, retries included.
type Proxy struct {
	// URL is the proxy's endpoint, "http://127.0.0.1:port".
	URL string
	// Conns counts the connections clients open to the proxy: to
	// DynamoDB, as the functions see it.
	Conns ConnCounter

	meter  *Meter
	target *url.URL
	client *http.Client
	srv    *http.Server
}

// NewProxy starts a proxy to target, a http://127.0.0.1 URL, on a free
// loopback port. Close stops it.
func NewProxy(target string, meter *Meter) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		return nil, fmt.Errorf("bench: proxy target %q is not a http://127.0.0.1 URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: proxy: %w", err)
	}
	p := &Proxy{
		URL:    "http://" + ln.Addr().String(),
		meter:  meter,
		target: u,
		client: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // straight to moto, whatever the environment says
			MaxIdleConnsPerHost: 256,
			DisableCompression:  true,
		}},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ConnState: p.Conns.Track}
	go p.srv.Serve(ln)
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// ServeHTTP forwards one request and meters it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target.ResolveReference(&url.URL{Path: r.URL.Path, RawQuery: r.URL.RawQuery}).String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	target := r.Header.Get("X-Amz-Target")
	if svc, op, ok := strings.Cut(target, "."); ok && strings.HasPrefix(svc, "DynamoDB_") {
		p.meter.Observe(op, body, resp.StatusCode, decoded(resp.Header, answer))
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// decoded returns the body as JSON, undoing gzip if the server used it.
func decoded(h http.Header, body []byte) []byte {
	if h.Get("Content-Encoding") != "gzip" {
		return body
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return body
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		return body
	}
	return plain
}
