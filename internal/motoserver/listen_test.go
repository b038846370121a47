package motoserver_test

import (
	"net"
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
