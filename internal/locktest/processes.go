package locktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
)

// Environment of a worker process.
const (
	envWorker     = "DBLOCK_LOCKTEST_WORKER"
	envDSN        = "DBLOCK_LOCKTEST_DSN"
	envMode       = EnvMode
	envName       = "DBLOCK_LOCKTEST_NAME"
	envIterations = "DBLOCK_LOCKTEST_ITERATIONS"
	envOut        = "DBLOCK_LOCKTEST_OUT"
	envShared     = "DBLOCK_LOCKTEST_SHARED"
	envTTL        = "DBLOCK_LOCKTEST_TTL"
)

// The renewing phase of RunProcesses: short leases renewed in the
// background, and critical sections that sleep, some of them past the
// renewal interval, so renewals run inside critical sections while other
// processes wait. Kept small: it runs for every mode on every dialect.
const (
	renewTTL        = 300 * time.Millisecond
	renewIterations = 30
	holdShort       = time.Millisecond
	holdLong        = renewTTL/3 + 30*time.Millisecond // Past one renewal.
	holdLongEvery   = 10
)

// EnvMode is the environment variable through which a worker sees the mode
// string given to RunProcesses, so a WorkerMain factory can pick its Locker.
const EnvMode = "DBLOCK_LOCKTEST_MODE"

// workerTimeout bounds a whole worker process (a hang guard).
const workerTimeout = 5 * time.Minute

// RunProcesses starts procs OS processes (this test binary, re-executed as
// workers through WorkerMain), each acquiring and releasing one name
// iterations times. Inside each critical section a worker appends a begin and
// an end record to a shared O_APPEND file and notes its token and the wall
// times of entry and exit in its own file. RunProcesses then asserts that
// every acquisition succeeded, that the shared file alternates begin/end of
// the same token (no two critical sections overlapped), and that, ordered by
// entry time, critical sections do not overlap and tokens strictly increase.
//
// A second, renewing phase follows on a fresh name: procs processes x
// renewIterations acquisitions with a short TTL renewed in the background
// (WithTTL(renewTTL)), each critical section sleeping,
// every holdLongEvery-th one past the renewal interval. A lease may then be
// lost on a loaded machine; a worker marks a section trusted only when it
// ended while the lease still held (before Lease.Deadline, or, without a
// deadline, with Err nil), and the overlap and token checks cover the
// trusted sections (a lost holder that goes on is what fencing tokens are
// for, not a violation). Losses are logged.
func RunProcesses(t *testing.T, iso *dbtest.Isolated, mode string, procs, iterations int) {
	t.Helper()
	runProcesses(t, iso, mode, procs, iterations, false)
	runProcesses(t, iso, mode, procs, renewIterations, true)
}

func runProcesses(t *testing.T, iso *dbtest.Isolated, mode string, procs, iterations int, renewing bool) {
	t.Helper()
	r := &procRun{t: t, phase: "default lease", procs: procs, iterations: iterations, renewing: renewing}
	if renewing {
		r.phase = "short renewed lease"
	}
	began := time.Now()
	defer func() {
		t.Logf("%s: %d processes x %d acquisitions in %v", r.phase, procs, iterations, time.Since(began).Round(time.Millisecond))
	}()
	dir := t.TempDir()
	r.shared = filepath.Join(dir, "shared.log")
	r.outs = make([]string, procs)
	for i := range r.outs {
		r.outs[i] = filepath.Join(dir, fmt.Sprintf("worker-%d.log", i))
	}
	r.run(iso, mode)
	all, trusted := r.sections()
	r.checkOrder(trusted)
	if len(trusted) < len(all) {
		return // A lost holder's records may interleave in the shared file.
	}
	r.checkSharedLog()
}

// procRun is one RunProcesses phase: its workers' result files and the
// shared log they all append to.
type procRun struct {
	t                 *testing.T
	phase             string
	procs, iterations int
	renewing          bool
	shared            string
	outs              []string
}

// section is one critical section a worker recorded.
type section struct {
	token      int64
	start, end int64
	trusted    int
	proc       int
}

// run starts the worker processes and waits for them all.
func (r *procRun) run(iso *dbtest.Isolated, mode string) {
	t := r.t
	name := RandomName("procs-" + mode)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+30*time.Second)
	defer cancel()
	cmds := make([]*exec.Cmd, r.procs)
	for i := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			envWorker+"=1", envDSN+"="+iso.DSN, envMode+"="+mode, envName+"="+name,
			envIterations+"="+strconv.Itoa(r.iterations), envOut+"="+r.outs[i], envShared+"="+r.shared)
		if r.renewing {
			cmd.Env = append(cmd.Env, envTTL+"="+renewTTL.String())
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.Stdout = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: start worker %d: %v", r.phase, i, err)
		}
		cmds[i] = cmd
		t.Cleanup(func() {
			if t.Failed() && stderr.Len() > 0 {
				t.Logf("worker %d output:\n%s", i, stderr.String())
			}
		})
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s: worker %d: %v", r.phase, i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// sections reads the workers' records: all of them, and those whose lease
// was still trusted at their end. Only a renewed short lease may lose one.
func (r *procRun) sections() (all, trusted []section) {
	t := r.t
	for i, out := range r.outs {
		f, err := os.Open(out)
		if err != nil {
			t.Fatalf("%s: worker %d results: %v", r.phase, i, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var s section
			if _, err := fmt.Sscan(sc.Text(), &s.token, &s.start, &s.end, &s.trusted); err != nil {
				t.Fatalf("%s: worker %d: bad line %q: %v", r.phase, i, sc.Text(), err)
			}
			s.proc = i
			all = append(all, s)
			if s.trusted == 1 {
				trusted = append(trusted, s)
			}
		}
		_ = f.Close()
	}
	if len(all) != r.procs*r.iterations {
		t.Fatalf("%s: %d critical sections recorded, want %d", r.phase, len(all), r.procs*r.iterations)
	}
	if lost := len(all) - len(trusted); lost > 0 {
		if !r.renewing {
			t.Fatalf("%s: %d critical sections ended after their lease was lost", r.phase, lost)
		}
		t.Logf("%s: %d of %d critical sections ended after their lease was lost (a loaded machine); checked the other %d",
			r.phase, lost, len(all), len(trusted))
	}
	return all, trusted
}

// checkOrder: the trusted sections never overlap, and their tokens
// increase in the order they began.
func (r *procRun) checkOrder(trusted []section) {
	sort.Slice(trusted, func(i, j int) bool { return trusted[i].start < trusted[j].start })
	for i := 1; i < len(trusted); i++ {
		p, c := trusted[i-1], trusted[i]
		if c.start < p.end {
			r.t.Fatalf("%s: critical sections overlap: token %d (worker %d) [%d, %d] and token %d (worker %d) [%d, %d]",
				r.phase, p.token, p.proc, p.start, p.end, c.token, c.proc, c.start, c.end)
		}
		if c.token <= p.token {
			r.t.Fatalf("%s: token %d (worker %d) acquired after token %d (worker %d): tokens must increase",
				r.phase, c.token, c.proc, p.token, p.proc)
		}
	}
}

// checkSharedLog: the shared file's order is the kernel's, so begin and
// end records must alternate.
func (r *procRun) checkSharedLog() {
	t := r.t
	data, err := os.ReadFile(r.shared)
	if err != nil {
		t.Fatalf("shared log: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2*r.procs*r.iterations {
		t.Fatalf("%s: shared log has %d records, want %d", r.phase, len(lines), 2*r.procs*r.iterations)
	}
	for i := 0; i < len(lines); i += 2 {
		b, e := lines[i], lines[i+1]
		if !strings.HasPrefix(b, "B ") || e != "E"+b[1:] {
			t.Fatalf("%s: shared log records %d-%d are %q, %q: another critical section interleaved", r.phase, i, i+1, b, e)
		}
	}
}

// WorkerMain runs the worker loop of RunProcesses and exits when this process
// was started as a worker; otherwise it returns at once. Call it first in TestMain.
func WorkerMain(newLocker func(db *dialect.DB) dblock.Locker) {
	if os.Getenv(envWorker) != "1" {
		return
	}
	if err := worker(newLocker); err != nil {
		fmt.Fprintln(os.Stderr, "locktest worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func worker(newLocker func(db *dialect.DB) dblock.Locker) (err error) {
	iterations, err := strconv.Atoi(os.Getenv(envIterations))
	if err != nil {
		return fmt.Errorf("iterations: %w", err)
	}
	name := os.Getenv(envName)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout)
	defer cancel()
	db, err := dialect.Open(ctx, os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	l := newLocker(db)
	defer func() { err = errors.Join(err, l.Close()) }()
	out, err := os.Create(os.Getenv(envOut))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	shared, err := os.OpenFile(os.Getenv(envShared), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, shared.Close()) }()
	pw := &procWorker{l: l, name: name, shared: shared, out: bufio.NewWriter(out), pid: os.Getpid(),
		opts: []dblock.Option{dblock.WithToken()}}
	if v := os.Getenv(envTTL); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("ttl: %w", err)
		}
		pw.opts = append(pw.opts, dblock.WithTTL(ttl))
		pw.renewing = true
	}
	for i := 0; i < iterations; i++ {
		if err := pw.iterate(ctx, i); err != nil {
			return fmt.Errorf("iteration %d: %w", i, err)
		}
	}
	return pw.out.Flush()
}

// procWorker is a worker process's state: its Locker and name, the log
// shared by every worker (a begin and an end line per section, appended)
// and its own output (a line per section).
type procWorker struct {
	l        dblock.Locker
	name     string
	opts     []dblock.Option
	renewing bool // a TTL was given: sections sleep, and a lease may end inside one
	shared   *os.File
	out      *bufio.Writer
	pid      int
}

// iterate runs the i-th critical section: acquire, log its begin and end
// in the shared log (sleeping between where leases renew), release, and
// write the token, start, end and whether the lease held throughout.
func (pw *procWorker) iterate(ctx context.Context, i int) error {
	lease, err := pw.l.Acquire(ctx, pw.name, pw.opts...)
	if err != nil {
		return err
	}
	start := time.Now().UnixNano()
	rec := fmt.Sprintf("%d %d\n", lease.Token(), pw.pid)
	if _, err := pw.shared.WriteString("B " + rec); err != nil {
		return err
	}
	if pw.renewing {
		hold := holdShort
		if i%holdLongEvery == holdLongEvery-1 {
			hold = holdLong
		}
		time.Sleep(hold)
	}
	if _, err := pw.shared.WriteString("E " + rec); err != nil {
		return err
	}
	end := time.Now().UnixNano()
	// Trusted: the section ended while the lease still held (the local
	// deadline is never later than the database's expiry).
	trusted := lease.Err() == nil
	if dl, ok := lease.Deadline(); ok && !time.Now().Before(dl) {
		trusted = false
	}
	if !trusted && !pw.renewing {
		return fmt.Errorf("lease ended inside the critical section: %v", lease.Err())
	}
	if err := lease.Release(ctx); err != nil && !(pw.renewing && errors.Is(err, dblock.ErrLost)) {
		return fmt.Errorf("release: %w", err)
	}
	t := 0
	if trusted {
		t = 1
	}
	_, err = fmt.Fprintf(pw.out, "%d %d %d %d\n", lease.Token(), start, end, t)
	return err
}
