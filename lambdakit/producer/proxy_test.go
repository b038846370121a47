package producer_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// faultProxy stands between the SDK and moto_server on loopback and makes
// SQS's partial failures happen for real: it takes chosen entries out of a
// SendMessageBatch request before moto sees it (so they are not enqueued)
// and adds them to the answer's Failed list, as SQS does when it fails some
// entries of a call. It can also fail whole calls with an HTTP status.
// Everything else passes through untouched.
type faultProxy struct {
	target string
	srv    *httptest.Server
	client *http.Client

	mu       sync.Mutex
	entries  map[string]entryFault // by message body
	callFail map[string]int        // a call carrying this body fails with this HTTP status
	seen     map[string]int        // how many SendMessageBatch requests carried each body
	sizes    []int                 // entries per SendMessageBatch request, in order
}

// entryFault fails an entry its first times appearances (always, when
// times is negative).
type entryFault struct {
	times       int
	senderFault bool
	code        string
	swallow     bool // leave the entry out of the answer altogether
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	p := &faultProxy{
		target:   target,
		client:   &http.Client{Transport: &http.Transport{Proxy: nil}},
		entries:  map[string]entryFault{},
		callFail: map[string]int{},
		seen:     map[string]int{},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// failEntry makes the entry whose body is body fail its first times
// appearances (always, when times < 0).
func (p *faultProxy) failEntry(body string, times int, senderFault bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	code := "InternalError"
	if senderFault {
		code = "InvalidParameterValue"
	}
	p.entries[body] = entryFault{times: times, senderFault: senderFault, code: code}
}

// swallowEntry takes the entry whose body is body out of the request and
// leaves it out of the answer, as a broken answer would.
func (p *faultProxy) swallowEntry(body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries[body] = entryFault{times: -1, swallow: true}
}

// failCall makes every SendMessageBatch request carrying body fail whole,
// with HTTP status.
func (p *faultProxy) failCall(body string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.callFail[body] = status
}

func (p *faultProxy) seenCount(body string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[body]
}

func (p *faultProxy) batchSizes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.sizes...)
}

type batchRequest struct {
	QueueURL string           `json:"QueueUrl"`
	Entries  []map[string]any `json:"Entries"`
}

type failedEntry struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessageBatch" {
		p.forward(w, r, body, nil)
		return
	}
	var req batchRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	var kept []map[string]any
	var failed []failedEntry
	status := 0
	p.mu.Lock()
	p.sizes = append(p.sizes, len(req.Entries))
	for _, e := range req.Entries {
		b, _ := e["MessageBody"].(string)
		id, _ := e["Id"].(string)
		p.seen[b]++
		if s, ok := p.callFail[b]; ok {
			status = s
		}
		if f, ok := p.entries[b]; ok && (f.times < 0 || p.seen[b] <= f.times) {
			if !f.swallow {
				failed = append(failed, failedEntry{ID: id, SenderFault: f.senderFault, Code: f.code, Message: "injected by the test proxy"})
			}
			continue
		}
		kept = append(kept, e)
	}
	p.mu.Unlock()
	if status != 0 {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-ErrorType", "InternalError")
		w.WriteHeader(status)
		io.WriteString(w, `{"__type":"InternalError","message":"injected by the test proxy"}`)
		return
	}
	if len(kept) == 0 {
		writeJSON(w, map[string]any{"Successful": []any{}, "Failed": failed})
		return
	}
	req.Entries = kept
	newBody, err := json.Marshal(req)
	if err != nil {
		http.Error(w, "proxy: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p.forward(w, r, newBody, failed)
}

// forward sends the request on to moto with body, and adds failed to the
// Failed list of a successful answer.
func (p *faultProxy) forward(w http.ResponseWriter, r *http.Request, body []byte, failed []failedEntry) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range r.Header {
		if k != "Content-Length" {
			req.Header[k] = v
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if len(failed) > 0 && resp.StatusCode == http.StatusOK {
		var answer map[string]any
		if err := json.Unmarshal(out, &answer); err != nil {
			http.Error(w, "proxy: moto's answer: "+err.Error(), http.StatusBadGateway)
			return
		}
		list, _ := answer["Failed"].([]any)
		for _, f := range failed {
			list = append(list, f)
		}
		answer["Failed"] = list
		writeJSON(w, answer)
		return
	}
	for k, v := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(out)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "proxy: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Write(b)
}
