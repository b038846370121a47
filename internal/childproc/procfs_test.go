//go:build linux

package childproc

import (
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A child started with Setup leads a group of its own, which Group finds
// with the child's own child in it, and nothing from this process's group.
func TestGroupIsTheChildAndWhatItStarted(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	Setup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { Signal(cmd, true); _ = cmd.Wait() }()
	var group []Proc
	for range 50 { // the shell starts its sleep at once; bounded all the same
		if group = Group(cmd.Process.Pid); len(group) == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(group) != 2 {
		t.Fatalf("Group = %v; want the shell and its sleep", group)
	}
	for _, p := range group {
		if p.Stat[2] != strconv.Itoa(cmd.Process.Pid) {
			t.Errorf("process %d is in group %s; want %d", p.PID, p.Stat[2], cmd.Process.Pid)
		}
	}
	if Stat(cmd.Process.Pid) == nil {
		t.Error("Stat of a running child is nil")
	}
}
