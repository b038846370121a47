package valkeystore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/valkeystore"
)

func TestCheckPassesNoevictionAndRefusesAnEvictingPolicy(t *testing.T) {
	srv := redisserver.ForTest(t) // noeviction
	s := newStore(t, newClient(t, srv.Addr))
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check on noeviction: %v; want nil", err)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	err := s.Check(t.Context())
	if !errors.Is(err, valkeystore.ErrMayEvict) || !strings.Contains(err.Error(), srv.Addr+": volatile-lru") {
		t.Errorf("Check on volatile-lru: got %v; want ErrMayEvict naming the node and its policy", err)
	}
}

func TestCheckAsksEveryNodeOfACluster(t *testing.T) {
	c := redisserver.ClusterForTest(t)
	s := newStore(t, newClient(t, c.Addrs()...))
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v; want nil", err)
	}
	last := c.Nodes[len(c.Nodes)-1]
	if _, err := last.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(t.Context()); !errors.Is(err, valkeystore.ErrMayEvict) || !strings.Contains(err.Error(), last.Addr) {
		t.Errorf("Check with one node on allkeys-lru: got %v; want ErrMayEvict naming %s", err, last.Addr)
	}
}
