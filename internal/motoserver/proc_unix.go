//go:build unix

package motoserver

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts moto in a process group of its own, so that Stop can
// signal everything it started and nothing else.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to moto's process
// group. The group may be gone already; that is what we want anyway.
func signalGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
