//go:build linux

package main

import (
	"os/signal"
	"syscall"
	"unsafe"
)

// setParentDeathSignal has the kernel kill CMD when dblock dies, so that a
// killed dblock never leaves CMD running without the lock.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// terminalForeground returns the foreground process group of the terminal on
// standard input, and false when standard input is not a terminal.
func terminalForeground() (int, bool) {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	if errno != 0 {
		return 0, false
	}
	return int(pgrp), true
}

// restoreForeground gives the terminal back to dblock's process group after
// CMD, which had it, has ended. SIGTTOU is ignored first: a background group
// that changes the terminal's foreground group would otherwise be stopped.
func restoreForeground() {
	signal.Ignore(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}
