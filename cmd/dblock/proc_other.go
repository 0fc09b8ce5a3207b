//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// forwarded are the signals passed on to CMD.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

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
	}
	return sig.String()
}

// prepareCmd leaves CMD as it is: without process groups, signals reach CMD
// only.
func prepareCmd(*exec.Cmd) bool { return false }

// signalCmd passes sig on to CMD; where the platform cannot deliver it, CMD
// is killed.
func signalCmd(cmd *exec.Cmd, sig os.Signal) {
	if cmd.Process == nil {
		return
	}
	if err := cmd.Process.Signal(sig); err != nil {
		_ = cmd.Process.Kill()
	}
}

func restoreForeground() {}
