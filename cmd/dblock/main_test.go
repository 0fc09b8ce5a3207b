//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests run the real binary, built once by TestMain, against
// the databases of internal/dbtest, as scripts and operators would.

// binary is the dblock binary built for the tests.
var binary string

// hangGuard bounds every process a test runs; reaching it is a failure.
const hangGuard = 90 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dblock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dblock")
	// The binary is built with the race detector only on request: each of
	// the suite's ~200 runs would pay its start-up cost, and the library's
	// goroutines are race-tested in their own packages.
	args := []string{"build", "-o", binary}
	if raceBuild && os.Getenv("DBLOCK_E2E_RACE") != "" {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// cliEnv is the environment of the binary: the test's, without a DSN, so
// that only --dsn (or an explicit DBLOCK_DSN) picks the database.
func cliEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envDSN+"=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// result is a finished run of the binary.
type result struct {
	code   int
	stdout string
	stderr string
}

// proc is a run of the binary in the background.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    string // stdout file
	errOut string // stderr file
	done   chan struct{}
	res    result
}

// cli describes how to run the binary.
type cli struct {
	dsn string   // Passed as --dsn unless empty.
	dir string   // Working directory; a temp dir when empty.
	env []string // Extra environment.
}

// start runs the binary with args in the background. Output goes to files
// rather than pipes, so a stray grandchild can never hold the test up. The
// process is killed at cleanup if still running.
func (c cli) start(t *testing.T, args ...string) *proc {
	t.Helper()
	if c.dsn != "" {
		args = append([]string{"--dsn", c.dsn}, args...)
	}
	dir := c.dir
	if dir == "" {
		dir = t.TempDir()
	}
	tmp := t.TempDir()
	p := &proc{t: t, out: filepath.Join(tmp, "stdout"), errOut: filepath.Join(tmp, "stderr"), done: make(chan struct{})}
	stdout, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(p.errOut)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Dir = dir
	p.cmd.Env = cliEnv(c.env...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start dblock %v: %v", args, err)
	}
	_ = stdout.Close()
	_ = stderr.Close()
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.res.code = exitStatus(p.cmd.ProcessState)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.code = -1
		}
		o, _ := os.ReadFile(p.out)
		e, _ := os.ReadFile(p.errOut)
		p.res.stdout, p.res.stderr = string(o), string(e)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the background run to end and returns its result.
func (p *proc) wait() result {
	p.t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(hangGuard):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("dblock %v still running after %v: stdout %q stderr %q", p.cmd.Args[1:], hangGuard, p.res.stdout, p.res.stderr)
		return p.res
	}
}

// signal sends sig to the background run.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// run runs the binary with args and waits for it.
func (c cli) run(t *testing.T, args ...string) result {
	t.Helper()
	return c.start(t, args...).wait()
}

// expect runs the binary and fails t unless it exits with code.
func (c cli) expect(t *testing.T, code int, args ...string) result {
	t.Helper()
	r := c.run(t, args...)
	if r.code != code {
		t.Fatalf("dblock %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// eventually polls cond every 20ms until it holds, failing t after the hang
// guard. It is a wait, not a timing assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", hangGuard, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oneLine fails t unless s is exactly one line containing every part.
func assertOneLine(t *testing.T, s string, parts ...string) {
	t.Helper()
	s = strings.TrimSuffix(s, "\n")
	if s == "" || strings.Contains(s, "\n") {
		t.Fatalf("stderr is not one line: %q", s)
	}
	if !strings.HasPrefix(s, "dblock: ") {
		t.Errorf("stderr line %q does not start with \"dblock: \"", s)
	}
	for _, rep := range []string{"dblock: ", "exec: ", `acquire "`, `release "`} {
		if strings.Count(s, rep) > 1 {
			t.Errorf("stderr line %q repeats %q", s, rep)
		}
	}
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("stderr line %q does not contain %q", s, p)
		}
	}
}

// script writes an executable shell script into dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// readLines returns the lines of a file ("" lines dropped).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, string(l))
		}
	}
	return out
}
