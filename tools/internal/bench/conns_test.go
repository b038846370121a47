package bench_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

// waitFor polls cond every 10 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("still not %s after 5 s", what)
}

func TestConnCounterCountsOpenAndOpenedConnections(t *testing.T) {
	var c bench.ConnCounter
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = c.Track
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	var conns []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	waitFor(t, "3 connections counted", func() bool { return c.Stats() == bench.ConnStats{MaxOpen: 3, Opened: 3} })
	conns[0].Close()
	conns[1].Close()
	// The server sees a closed connection when its read ends.
	waitFor(t, "down to 1 open", func() bool { c.Reset(); return c.Stats().MaxOpen == 1 })
	if got := c.Stats(); got.Opened != 0 {
		t.Fatalf("after Reset: %+v; want none opened", got)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitFor(t, "the new connection counted", func() bool { return c.Stats() == bench.ConnStats{MaxOpen: 2, Opened: 1} })
	conns[2].Close()
}
