//go:build !unix

package childproc

import "os/exec"

// Setup does nothing: there are no process groups here.
func Setup(*exec.Cmd) {}

// Signal kills the child itself: there are no process groups to signal
// here, and no polite signal either.
func Signal(cmd *exec.Cmd, _ bool) {
	_ = cmd.Process.Kill()
}

// Freeze does nothing: without process groups or SIGSTOP, the child runs on
// between invocations.
func Freeze(*exec.Cmd, bool) {}
