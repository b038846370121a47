//go:build unix

package runtimeapi

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the bootstrap in a process group of its own, so that a
// kill reaches whatever it started too, and nothing else.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to the bootstrap's
// process group. The group may be gone already; that is what we want anyway.
func signalGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
