package runtimeapi

import "syscall"

// setDeathSignal has the kernel kill the bootstrap when its parent dies
// without closing the Runner (a SIGKILL, a test binary's timeout), so that no
// function outlives the tool that ran it.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
