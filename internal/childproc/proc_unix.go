//go:build unix

// Package childproc starts child processes (moto_server, function
// bootstraps) so that they can be stopped with everything they started, and
// do not outlive this process.
package childproc

import (
	"os/exec"
	"syscall"
)

// Setup puts the child in a process group of its own, so that Signal
// reaches whatever it started too, and nothing else; on Linux the child is
// also killed if this process dies without stopping it.
func Setup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// Signal sends SIGTERM, or SIGKILL when kill is set, to the child's process
// group. The group may be gone already; that is what we want anyway.
func Signal(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

// Freeze stops the child's process group with SIGSTOP, or resumes it with
// SIGCONT when frozen is false, as Lambda freezes an execution environment
// between invocations. SIGKILL still ends a stopped group; SIGTERM waits
// for SIGCONT.
func Freeze(cmd *exec.Cmd, frozen bool) {
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
