package sharedstress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// Kinds of Run; the fair ones take the same locks with Config.Fair.
const (
	KindRW            = "rwlock"
	KindSemaphore     = "semaphore"
	KindRWFair        = KindRW + fairSuffix
	KindSemaphoreFair = KindSemaphore + fairSuffix

	fairSuffix = "/fair"
)

// Environment of a worker process.
const (
	envKind       = "DBLOCK_SHAREDSTRESS_KIND"
	envDSN        = "DBLOCK_SHAREDSTRESS_DSN"
	envName       = "DBLOCK_SHAREDSTRESS_NAME"
	envIterations = "DBLOCK_SHAREDSTRESS_ITERATIONS"
	envOut        = "DBLOCK_SHAREDSTRESS_OUT"
)

// workerTimeout bounds a whole worker process (a hang guard).
const workerTimeout = 5 * time.Minute

const (
	// sharedTTL is the workers' lease: short, so that a killed holder's
	// share comes back within the test.
	sharedTTL = time.Second
	// sharedLimit and the permits of one grant (1 or 2) of KindSemaphore.
	sharedLimit = 3
)

// WorkerMain runs the worker loop of Run and exits when
// this process was started as one; otherwise it returns at once. Call it
// first in TestMain.
func WorkerMain() {
	kind := os.Getenv(envKind)
	if kind == "" {
		return
	}
	if err := sharedWorker(kind); err != nil {
		fmt.Fprintln(os.Stderr, "locktest shared worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// sharedSection is one section a worker held.
type sharedSection struct {
	write      bool
	token      int64
	permits    int
	start, end int64
	trusted    bool
	proc       int
}

// Run runs procs workers of kind, iterations sections each,
// kills `kills` of them with SIGKILL while they hold, and checks the history.
func Run(t *testing.T, iso *dbtest.Isolated, kind string, procs, iterations, kills int) {
	t.Helper()
	dir := t.TempDir()
	name := locktest.RandomName("shared-" + kind)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+30*time.Second)
	defer cancel()
	outs := make([]string, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		outs[i] = filepath.Join(dir, fmt.Sprintf("worker-%d", i))
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envKind+"="+kind, envDSN+"="+iso.DSN, envName+"="+name,
			envIterations+"="+strconv.Itoa(iterations), envOut+"="+outs[i])
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", i, err)
		}
		cmds[i] = cmd
		t.Cleanup(func() {
			if t.Failed() && out.Len() > 0 {
				t.Logf("worker %d output:\n%s", i, out.String())
			}
		})
	}
	killed := killHolders(t, outs, cmds, kills)
	for i, cmd := range cmds {
		err := cmd.Wait()
		if killed[i] {
			continue
		}
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	all := readSharedSections(t, outs)
	var trusted []sharedSection
	for _, s := range all {
		if s.trusted {
			trusted = append(trusted, s)
		}
	}
	if want := (procs - kills) * iterations; len(all) < want {
		t.Fatalf("%d sections recorded, want at least %d", len(all), want)
	}
	t.Logf("%s: %d sections (%d trusted), %d workers killed while holding", kind, len(all), len(trusted), kills)
	if strings.HasPrefix(kind, KindSemaphore) {
		checkPermits(t, trusted)
		return
	}
	checkReadWrite(t, trusted)
}

// killHolders kills n workers, each once it has recorded the start of a
// section it has not ended (it holds), and reports which it killed.
func killHolders(t *testing.T, outs []string, cmds []*exec.Cmd, n int) map[int]bool {
	t.Helper()
	killed := map[int]bool{}
	deadline := time.Now().Add(time.Minute)
	for i := 0; len(killed) < n && time.Now().Before(deadline); i = (i + 1) % len(cmds) {
		if killed[i] {
			continue
		}
		data, _ := os.ReadFile(outs[i])
		if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) > 2 && strings.HasPrefix(lines[len(lines)-1], "B ") {
			if err := cmds[i].Process.Signal(syscall.SIGKILL); err == nil {
				killed[i] = true
			}
		}
		time.Sleep(time.Millisecond)
	}
	if len(killed) < n {
		t.Fatalf("killed %d workers while they held, want %d", len(killed), n)
	}
	return killed
}

// readSharedSections reads every worker's ended sections.
func readSharedSections(t *testing.T, outs []string) []sharedSection {
	t.Helper()
	var all []sharedSection
	for i, out := range outs {
		f, err := os.Open(out)
		if err != nil {
			t.Fatalf("worker %d results: %v", i, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var tag, kind string
			var s sharedSection
			var trusted int
			if strings.HasPrefix(sc.Text(), "B ") {
				continue
			}
			if _, err := fmt.Sscan(sc.Text(), &tag, &kind, &s.token, &s.permits, &s.start, &s.end, &trusted); err != nil {
				t.Fatalf("worker %d: bad line %q: %v", i, sc.Text(), err)
			}
			s.write, s.trusted, s.proc = kind == "w", trusted == 1, i
			all = append(all, s)
		}
		_ = f.Close()
	}
	return all
}

// checkReadWrite: no write section overlaps another section; writes'
// tokens increase in their order; a read after a write has a greater token
// than the write, and a write after a read a greater one than the read.
func checkReadWrite(t *testing.T, ss []sharedSection) {
	t.Helper()
	sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
	reads, writes := 0, 0
	for i, a := range ss {
		if a.write {
			writes++
		} else {
			reads++
		}
		for _, b := range ss[i+1:] {
			if b.start >= a.end {
				if b.token < a.token || (a.write || b.write) && b.token == a.token {
					t.Fatalf("token %d (worker %d, write %v) began after token %d (worker %d, write %v) ended: tokens must not go back",
						b.token, b.proc, b.write, a.token, a.proc, a.write)
				}
				continue
			}
			if a.write || b.write {
				t.Fatalf("sections overlap with a writer: token %d (worker %d, write %v) [%d, %d] and token %d (worker %d, write %v) [%d, %d]",
					a.token, a.proc, a.write, a.start, a.end, b.token, b.proc, b.write, b.start, b.end)
			}
			if a.token != b.token {
				t.Fatalf("overlapping readers with tokens %d and %d: readers together share one", a.token, b.token)
			}
		}
	}
	if reads == 0 || writes == 0 {
		t.Fatalf("%d reads and %d writes checked: want both", reads, writes)
	}
}

// checkPermits: at no instant are more than sharedLimit permits out.
func checkPermits(t *testing.T, ss []sharedSection) {
	t.Helper()
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, s := range ss {
		edges = append(edges, edge{s.start, s.permits}, edge{s.end, -s.permits})
	}
	// Ends before starts at the same instant: touching sections do not overlap.
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].delta < edges[j].delta
	})
	out, most := 0, 0
	for _, e := range edges {
		out += e.delta
		most = max(most, out)
		if out > sharedLimit {
			t.Fatalf("%d permits out at %d, limit %d", out, e.at, sharedLimit)
		}
	}
	if most < 2 {
		t.Fatalf("at most %d permits out at once: the stress never shared the semaphore", most)
	}
}

// sharedWorker is one worker of Run.
func sharedWorker(kind string) (err error) {
	iterations, err := strconv.Atoi(os.Getenv(envIterations))
	if err != nil {
		return fmt.Errorf("iterations: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout)
	defer cancel()
	db, err := dialect.Open(ctx, os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	out, err := os.Create(os.Getenv(envOut))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	w := &sharedLoop{name: os.Getenv(envName), out: out}
	base, fair := strings.CutSuffix(kind, fairSuffix)
	switch base {
	case KindRW:
		l, err := rwlock.New(db, &rwlock.Config{Fair: fair})
		if err != nil {
			return err
		}
		defer l.Close()
		w.rw = l
	case KindSemaphore:
		l, err := semaphore.New(db, &semaphore.Config{Fair: fair})
		if err != nil {
			return err
		}
		defer l.Close()
		w.sem = l
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	for range iterations {
		if err := w.section(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sharedLoop is a worker's state: its Locker and its record file.
type sharedLoop struct {
	name string
	out  *os.File
	rw   *rwlock.Locker
	sem  *semaphore.Locker
}

// section takes a lease (a write one time in four, or 1 or 2 permits),
// records its start, holds it a moment and records its end, then releases.
func (w *sharedLoop) section(ctx context.Context) error {
	opts := []dblock.Option{dblock.WithTTL(sharedTTL)}
	write, permits := rand.IntN(4) == 0, 1+rand.IntN(2)
	var lease *dblock.Lease
	var err error
	switch {
	case w.sem != nil:
		write = false
		lease, err = w.sem.Acquire(ctx, w.name, sharedLimit, permits, opts...)
	case write:
		lease, err = w.rw.Acquire(ctx, w.name, opts...)
	default:
		lease, err = w.rw.AcquireRead(ctx, w.name, opts...)
	}
	if err != nil {
		return err
	}
	kind := "r"
	if write {
		kind = "w"
	}
	start := time.Now().UnixNano()
	if _, err := fmt.Fprintf(w.out, "B %s %d\n", kind, lease.Token()); err != nil {
		return err
	}
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	end := time.Now().UnixNano()
	trusted := 0
	if dl, ok := lease.Deadline(); lease.Err() == nil && (!ok || time.Now().Before(dl)) {
		trusted = 1
	}
	if _, err := fmt.Fprintf(w.out, "E %s %d %d %d %d %d\n", kind, lease.Token(), permits, start, end, trusted); err != nil {
		return err
	}
	if err := lease.Release(ctx); err != nil && !errors.Is(err, dblock.ErrLost) {
		return err
	}
	return nil
}
