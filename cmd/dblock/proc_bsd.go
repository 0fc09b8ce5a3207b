//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal does nothing: only Linux can kill a child when its
// parent dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// terminalForeground reports no terminal: outside Linux CMD always runs in a
// background process group of its own.
func terminalForeground() (int, bool) { return 0, false }

func restoreForeground() {}
