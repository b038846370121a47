//go:build unix && !linux

package runtimeapi

import "syscall"

// setDeathSignal does nothing: only Linux can tie a child's life to its
// parent's.
func setDeathSignal(*syscall.SysProcAttr) {}
