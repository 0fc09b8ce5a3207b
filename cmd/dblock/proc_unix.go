//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// prepareCmd puts CMD in a process group of its own, so that forwarded
// signals and the SIGTERM of a lost lock reach everything CMD started, and
// (on Linux) has it killed if dblock dies. When dblock runs in the foreground
// of a terminal, CMD's group takes the terminal (so it can read it, and
// Ctrl-C reaches it directly); prepareCmd then reports true and
// restoreForeground must be called once CMD has ended.
func prepareCmd(cmd *exec.Cmd) (foreground bool) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	if pgrp, ok := terminalForeground(); ok && pgrp == syscall.Getpgrp() {
		attr.Foreground = true
		attr.Ctty = 0
		foreground = true
	}
	cmd.SysProcAttr = attr
	return foreground
}

// forwarded are the signals passed on to CMD.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// signame returns the conventional name of a forwarded signal.
func signame(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return sig.String()
}

// signalCmd sends sig to CMD's process group.
func signalCmd(cmd *exec.Cmd, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, s); err != nil {
		// The group is gone or was never made: signal the process itself.
		_ = cmd.Process.Signal(sig)
	}
}
