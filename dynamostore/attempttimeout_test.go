package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// stallBody is a server in front of moto that answers every PutItem with
// its status and headers at once, a first part of the body, and then
// nothing more: a connection that stalls mid-answer. Every other request
// goes to moto.
func stallBody(tb testing.TB) (endpoint string, putItems *atomic.Int32) {
	tb.Helper()
	u, err := url.Parse(local(tb).URL)
	if err != nil {
		tb.Fatal(err)
	}
	forward := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport: &http.Transport{Proxy: nil},
	}
	closing := make(chan struct{})
	putItems = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if testenv.Operation(r) != "PutItem" {
			forward.ServeHTTP(w, r)
			return
		}
		putItems.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Content-Length", "64")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"Attributes":`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-closing:
		}
	}))
	tb.Cleanup(func() {
		close(closing)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL, putItems
}

// A server that sends its headers and then stalls the body must not hold
// a store call without a context deadline for ever: each attempt is
// bounded by AttemptTimeout, as a timeout, and retried.
func TestAttemptTimeoutBoundsAStalledBodyWithoutDeadline(t *testing.T) {
	f := setup(t)
	endpoint, putItems := stallBody(t)
	client := dynamodb.NewFromConfig(local(t).Config(), dynamostore.WithLambdaDefaults(quickBackoff, func(c *dynamostore.ClientOptions) {
		c.AttemptTimeout = 100 * time.Millisecond
		c.MaxAttempts = 3
	}), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	})
	store := newStore(t, client, f.table)

	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := store.Acquire(context.Background(), record("stalled-body", now()), time.Now())
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire without a deadline, whose answer's body stalls, did not return within 10 s (%d PutItem attempts so far); want it bounded by 3 attempts of 100 ms", putItems.Load())
	}
	took := time.Since(start)
	t.Logf("Acquire returned after %v: %v", took, err)
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
	case took >= 100*time.Millisecond && strings.Contains(fmt.Sprint(err), "use of closed network connection"):
		// The first attempt timed out (100 ms went by), and a retry
		// found its connection closed under it: net/http may hand a
		// retry the connection an earlier attempt's cancellation is
		// closing, and then the later attempts fail at once (seen in CI
		// under -race, after 200 ms, and on a cold build after 110 ms).
		// Still bounded, still retried: the attempts are counted below.
	default:
		t.Errorf("got %v; want a timeout error", err)
	}
	if got := putItems.Load(); got != 3 {
		t.Errorf("got %d attempts; want 3 (each timed out, then retried)", got)
	}
}

// A listener that accepts connections and never reads or answers (a
// stuck proxy): each attempt is bounded, as a timeout, and retried.
func TestAttemptTimeoutBoundsASilentListenerWithoutDeadline(t *testing.T) {
	f := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	client := dynamodb.NewFromConfig(local(t).Config(), dynamostore.WithLambdaDefaults(quickBackoff, func(c *dynamostore.ClientOptions) {
		c.AttemptTimeout = 100 * time.Millisecond
		c.MaxAttempts = 3
	}), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://" + ln.Addr().String())
	})
	store := newStore(t, client, f.table)
	done := make(chan error, 1)
	go func() {
		_, _, err := store.Acquire(context.Background(), record("silent", now()), time.Now())
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire without a deadline to a silent listener did not return within 10 s (%d connections)", accepted.Load())
	}
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("got %v; want a timeout error", err)
	}
	if got := accepted.Load(); got != 3 {
		t.Errorf("got %d connections; want 3 (each attempt timed out, then retried)", got)
	}
}
