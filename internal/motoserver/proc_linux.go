package motoserver

import "syscall"

// setDeathSignal has the kernel kill moto when the test binary dies without
// running Stop (a panic in TestMain, a timeout, a SIGKILL), so that no
// server outlives its tests.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
