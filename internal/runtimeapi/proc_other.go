//go:build !unix

package runtimeapi

import "os/exec"

func setProcAttr(*exec.Cmd) {}

// signalGroup kills the bootstrap itself: there are no process groups to
// signal here, and no polite signal either.
func signalGroup(cmd *exec.Cmd, _ bool) {
	_ = cmd.Process.Kill()
}
