//go:build unix && !linux

package childproc

import "syscall"

// setDeathSignal does nothing: only Linux can tie a child's life to its
// parent's.
func setDeathSignal(*syscall.SysProcAttr) {}
