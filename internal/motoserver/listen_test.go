package motoserver_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The listen address decides who can connect; 127.0.0.2 (loopback too)
// reaches a server only when it listens on every interface.
func TestStartAtListensWhereAsked(t *testing.T) {
	testenv.RequireMotoServer(t)
	for _, c := range []struct {
		host      string
		wantOther bool
	}{
		{"127.0.0.1", false},
		{"0.0.0.0", true},
	} {
		t.Run(c.host, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			s, err := motoserver.StartAt(c.host, port)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Stop)
			u, err := url.Parse(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			if u.Hostname() != "127.0.0.1" || u.Port() != strconv.Itoa(port) {
				t.Errorf("URL %s; want it on 127.0.0.1:%d", s.URL, port)
			}
			if got := testenv.Reachable(net.JoinHostPort("127.0.0.2", u.Port())); got != c.wantOther {
				t.Errorf("127.0.0.2:%s reachable = %t; want %t", u.Port(), got, c.wantOther)
			}
		})
	}
}

// A port another server took between the choice of a free port and moto's
// bind: that server's answer is not moto's, and StartAt fails (moto cannot
// bind) instead of handing back a Server whose URL leads to the other one
// (a demo's CreateTable then met the other server's 404).
func TestStartAtRefusesAPortAnotherServerAnswers(t *testing.T) {
	testenv.RequireMotoServer(t)
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	port := other.Listener.Addr().(*net.TCPAddr).Port
	s, err := motoserver.StartAt("127.0.0.1", port)
	if err == nil {
		s.Stop()
		t.Fatalf("StartAt on a port another server holds = %s, nil; want an error", s.URL)
	}
}
