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

func TestCallsCountsTheNamedCommands(t *testing.T) {
	s := redisserver.ForTest(t)
	for range 3 {
		if _, err := s.Do("SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Do("GET", "k"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Calls("set", "get"); err != nil || n != 4 {
		t.Errorf("Calls(set, get) = %d, %v; want 4", n, err)
	}
	if n, err := s.Calls("evalsha"); err != nil || n != 0 {
		t.Errorf("Calls(evalsha) = %d, %v; want 0", n, err)
	}
}
