package childproc

import (
	"os/exec"
	"runtime"
)

// Start starts cmd (after Setup) and waits for it in the background:
// exited is closed once it has exited, and then waitErr returns what
// cmd.Wait returned.
//
// On Linux the child gets SIGKILL when the thread that started it ends
// (see setDeathSignal), so that thread must live as long as the child.
// Start starts it from a goroutine locked to its thread, never unlocked,
// which ends the thread only when the goroutine returns, after the child
// has exited.
func Start(cmd *exec.Cmd) (exited <-chan struct{}, waitErr func() error, err error) {
	Setup(cmd)
	done := make(chan struct{})
	started := make(chan error, 1)
	var werr error
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		werr = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	return done, func() error { <-done; return werr }, nil
}
