package redisserver

import (
	"errors"
	"os"
	"testing"
)

// ForTest starts a server for tb (see Start) and stops it when tb ends.
// Without a server on PATH it skips tb, saying so, or fails it when the CI
// environment variable is set; a server that will not start fails tb.
func ForTest(tb testing.TB, args ...string) *Server {
	tb.Helper()
	requireInstalled(tb)
	s, err := Start(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// ClusterForTest starts a cluster of three primaries for tb (see
// StartCluster) and stops it when tb ends; it skips or fails tb as ForTest
// does.
func ClusterForTest(tb testing.TB, args ...string) *Cluster {
	tb.Helper()
	requireInstalled(tb)
	c, err := StartCluster(3, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// ProxyForTest starts a proxy to target for tb and closes it when tb ends.
func ProxyForTest(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// RequireInstalled skips tb without a server on PATH, saying so, or fails
// it when the CI environment variable is set: for tests whose program
// starts the server itself.
func RequireInstalled(tb testing.TB) {
	tb.Helper()
	requireInstalled(tb)
}

func requireInstalled(tb testing.TB) {
	tb.Helper()
	if err := Installed(); errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%v; failing, because CI is set", err)
		}
		tb.Skipf("%v; skipping", err)
	}
}
