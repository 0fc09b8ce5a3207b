//go:build !unix

package main

import (
	"os"
	"os/exec"
)

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
