package redisserver_test

import (
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/redisserver"
)

func TestStartAnswersAndStopEndsTheProcess(t *testing.T) {
	s := redisserver.ForTest(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING after Stop answered; want the server gone")
	}
}

func TestRestartKeepsWhatAppendOnlyWrote(t *testing.T) {
	s := redisserver.ForTest(t, "--appendonly", "yes", "--appendfsync", "always")
	if _, err := s.Do("SET", "k", "kept"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID
	if err := s.Restart(0); err != nil {
		t.Fatal(err)
	}
	if s.PID == pid {
		t.Errorf("PID unchanged after Restart (%d); want a new process", pid)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "kept" {
		t.Fatalf("GET k after restart = %q, %v; want kept", got, err)
	}
}

func TestClusterServesEverySlot(t *testing.T) {
	c := redisserver.ClusterForTest(t)
	for _, n := range c.Nodes {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Errorf("node %s: %v\n%s", n.Addr, err, info)
		}
	}
}

func TestProxyCountsCommandsSentThroughIt(t *testing.T) {
	s := redisserver.ForTest(t)
	p := redisserver.ProxyForTest(t, s.Addr)
	proxied := &redisserver.Server{Addr: p.Addr}
	for _, v := range []string{"a", strings.Repeat("x", 100_000)} { // one small, one over several reads
		if _, err := proxied.Do("SET", "k", v); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Do("STRLEN", "k"); err != nil || got != "100000" {
		t.Fatalf("STRLEN k = %s, %v; want the large value, whole", got, err)
	}
	if cmds, reads := p.Commands(); cmds != 2 || reads < 2 {
		t.Errorf("Commands() = %d, %d reads; want 2 commands, in 2 reads or more", cmds, reads)
	}
}
