package childproc

import "syscall"

// setDeathSignal has the kernel kill the child when its parent dies without
// stopping it (a panic, a test timeout, a SIGKILL). The kernel ties this to
// the thread that started the child. Go ends a thread only when a goroutine
// locked to it exits, so a child started from an ordinary goroutine is
// safe, and one started from a locked goroutine must keep it alive (as
// motoserver does).
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
