package faults

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(runWorker())
	}
	code := m.Run()
	for _, d := range cleanupDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// proc is a child process started by a test, stopped by PID at cleanup.
type proc struct {
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
	lines chan string // the worker's stdout lines after "ready" (dropped when full)
}

// startWorker re-executes the test binary as a worker with env added.
func startWorker(t *testing.T, id string, env map[string]string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+id)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// The worker dies with us even if the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedWriter{w: &strings.Builder{}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), lines: make(chan string, 1000)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if sc.Text() == "ready" {
				once.Do(func() { close(ready) })
				continue
			}
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("worker %s exited before it was ready: %v: %s", id, p.err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s not ready after 30 s", id)
	}
	return p
}

// kill SIGKILLs the process (by PID) and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 64*1024 {
		return len(b), nil
	}
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// runAs runs a command as a non-root user (when we are root) and returns its
// combined output; the error includes the output.
func runAs(user string, name string, args ...string) (string, error) {
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", user, "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
