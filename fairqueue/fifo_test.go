package fairqueue_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

// Environment of a FIFO helper process.
const (
	envFIFOWorker = "DBLOCK_FAIRQUEUE_FIFO_WORKER"
	envFIFODSN    = "DBLOCK_FAIRQUEUE_FIFO_DSN"
	envFIFOName   = "DBLOCK_FAIRQUEUE_FIFO_NAME"
	envFIFOBeat   = "DBLOCK_FAIRQUEUE_FIFO_HEARTBEAT" // interval,timeout
)

// fifoHangGuard bounds every wait of the FIFO tests: a guard against hangs,
// not a timing assertion.
const fifoHangGuard = 2 * time.Minute

// fifoWorkerMain runs a FIFO helper and exits when this process was started
// as one; otherwise it returns at once.
//
// A helper reads commands on stdin: "go K" starts waiter K, which acquires
// the name as owner "fifo-K", reports "acq K TOKEN" on stdout, holds the lock
// for a moment and releases it, reporting "rel K". End of input closes the
// Locker and exits.
func fifoWorkerMain() {
	if os.Getenv(envFIFOWorker) != "1" {
		return
	}
	if err := fifoWorker(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fifo worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func fifoWorker(in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), fifoHangGuard)
	defer cancel()
	db, err := dialect.Open(ctx, os.Getenv(envFIFODSN))
	if err != nil {
		return err
	}
	defer db.Close()
	var cfg fairqueue.Config
	if v := os.Getenv(envFIFOBeat); v != "" {
		iv, to, _ := strings.Cut(v, ",")
		if cfg.HeartbeatInterval, err = time.ParseDuration(iv); err != nil {
			return err
		}
		if cfg.HeartbeatTimeout, err = time.ParseDuration(to); err != nil {
			return err
		}
	}
	l, err := fairqueue.New(db, &cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	name := os.Getenv(envFIFOName)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		k, ok := strings.CutPrefix(sc.Text(), "go ")
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, name, dblock.WithOwner("fifo-"+k))
			if err != nil {
				say("err %s %v", k, err)
				return
			}
			say("acq %s %d %d", k, lease.Token(), time.Now().UnixNano())
			time.Sleep(2 * time.Millisecond)
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				say("err %s release: %v", k, err)
				return
			}
			say("rel %s", k)
		}()
	}
	wg.Wait()
	return sc.Err()
}

// helper is a running FIFO helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// fifoEvent is one line of a helper's output.
type fifoEvent struct {
	kind  string // acq, rel, err
	k     int
	token int64
	at    time.Time
	text  string
}

// startHelpers starts n helper processes; their events arrive on the channel.
func startHelpers(t *testing.T, iso *dbtest.Isolated, name string, n int, beat string) ([]*helper, <-chan fifoEvent) {
	t.Helper()
	events := make(chan fifoEvent, 1024)
	var readers sync.WaitGroup
	t.Cleanup(readers.Wait) // Runs after the helpers' clean-ups below have ended them.
	helpers := make([]*helper, n)
	for i := range helpers {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envFIFOWorker+"=1", envFIFODSN+"="+iso.DSN, envFIFOName+"="+name, envFIFOBeat+"="+beat)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start helper: %v", err)
		}
		h := &helper{cmd: cmd, stdin: stdin}
		helpers[i] = h
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) < 2 {
					continue
				}
				k, _ := strconv.Atoi(f[1])
				ev := fifoEvent{kind: f[0], k: k, text: sc.Text()}
				if ev.kind == "acq" && len(f) == 4 {
					ev.token, _ = strconv.ParseInt(f[2], 10, 64)
					ns, _ := strconv.ParseInt(f[3], 10, 64)
					ev.at = time.Unix(0, ns)
				}
				events <- ev
			}
		}()
		t.Cleanup(func() {
			_ = h.stdin.Close()
			done := make(chan error, 1)
			go func() { done <- h.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil && h.cmd.ProcessState != nil && !h.cmd.ProcessState.Exited() {
					return // Killed on purpose.
				}
				if err != nil {
					t.Errorf("helper %d: %v; stderr:\n%s", i, err, stderr.String())
				}
			case <-time.After(fifoHangGuard):
				_ = h.cmd.Process.Kill()
				t.Errorf("helper %d did not exit", i)
			}
		})
	}
	return helpers, events
}

// enqueueInOrder starts waiter k on helpers[pick(k)] and waits until its row is
// visible before starting the next, so arrival order is known exactly.
func enqueueInOrder(t *testing.T, ctx context.Context, db *dialect.DB, name string, n int, pick func(k int) *helper) {
	t.Helper()
	for k := 0; k < n; k++ {
		if _, err := fmt.Fprintf(pick(k).stdin, "go %d\n", k); err != nil {
			t.Fatalf("command waiter %d: %v", k, err)
		}
		owner := fmt.Sprintf("fifo-%d", k)
		for {
			q, err := fairqueue.Queue(ctx, db, name)
			if err != nil {
				t.Fatalf("queue: %v", err)
			}
			if len(q) > 0 && q[len(q)-1].Owner == owner {
				if q[len(q)-1].Position != len(q) || len(q) > k+1 {
					t.Fatalf("waiter %d queued at position %d of %d", k, q[len(q)-1].Position, len(q))
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiter %d never appeared in the queue", k)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// collect reads events until want acquisitions and releases were seen.
func collect(t *testing.T, ctx context.Context, events <-chan fifoEvent, want int) []fifoEvent {
	t.Helper()
	var acqs []fifoEvent
	rels := 0
	for len(acqs) < want || rels < want {
		select {
		case ev := <-events:
			switch ev.kind {
			case "acq":
				acqs = append(acqs, ev)
			case "rel":
				rels++
			default:
				t.Fatalf("helper: %s", ev.text)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d acquisitions (%d releases) before the hang guard", len(acqs), want, rels)
		}
	}
	sort.Slice(acqs, func(i, j int) bool { return acqs[i].token < acqs[j].token })
	return acqs
}

// violations counts pairs acquired in the opposite order of their arrival.
func violations(order []int) int {
	n := 0
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[i] > order[j] {
				n++
			}
		}
	}
	return n
}

// TestFIFOProcesses queues 20 waiters spread over 3 OS processes, each
// arriving after the previous one's row is visible, behind a holder; once
// the holder releases, the acquisitions (ordered by fencing token) must come
// in arrival order.
func TestFIFOProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		const waiters, procs = 20, 3
		ctx, cancel := context.WithTimeout(context.Background(), fifoHangGuard)
		defer cancel()
		name := locktest.RandomName("fifo")
		holder := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = holder.Close() })
		lease, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		helpers, events := startHelpers(t, iso, name, procs, "")
		enqueueInOrder(t, ctx, iso.DB, name, waiters, func(k int) *helper { return helpers[k%procs] })
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("holder release: %v", err)
		}
		acqs := collect(t, ctx, events, waiters)
		order := make([]int, len(acqs))
		for i, ev := range acqs {
			order[i] = ev.k
			if i > 0 && ev.token <= acqs[i-1].token {
				t.Errorf("token %d after %d", ev.token, acqs[i-1].token)
			}
		}
		v := violations(order)
		t.Logf("%s: acquisition order %v, %d FIFO violations", iso.Kind, order, v)
		if v != 0 {
			t.Fatalf("%d FIFO violations: acquisition order %v, want 0..%d", v, order, waiters-1)
		}
		for _, h := range helpers {
			_ = h.stdin.Close()
		}
		if q, err := fairqueue.Queue(ctx, iso.DB, name); err != nil || len(q) != 0 {
			t.Fatalf("queue after the run: %v %v", q, err)
		}
	})
}

// TestSIGKILLWaiter kills a waiter in the middle of the queue with SIGKILL.
// The waiters behind it are delayed by at most its heartbeat timeout (plus a
// small allowance for a loaded machine), the survivors keep their order,
// and the queue drains.
func TestSIGKILLWaiter(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		const waiters, victim = 8, 4
		const interval, timeout = 200 * time.Millisecond, 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), fifoHangGuard)
		defer cancel()
		name := locktest.RandomName("kill")
		holder := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = holder.Close() })
		lease, err := holder.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		// Helpers 0 and 1 take the survivors; helper 2 only the victim.
		helpers, events := startHelpers(t, iso, name, 3, fmt.Sprintf("%v,%v", interval, timeout))
		enqueueInOrder(t, ctx, iso.DB, name, waiters, func(k int) *helper {
			if k == victim {
				return helpers[2]
			}
			return helpers[k%2]
		})
		if err := helpers[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill: %v", err)
		}
		killed := time.Now()
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("holder release: %v", err)
		}
		acqs := collect(t, ctx, events, waiters-1)
		var order []int
		for _, ev := range acqs {
			order = append(order, ev.k)
		}
		if v := violations(order); v != 0 || len(order) != waiters-1 {
			t.Fatalf("survivors acquired in order %v (%d FIFO violations), want 0..%d without %d", order, v, waiters-1, victim)
		}
		for _, ev := range acqs {
			if ev.k == victim {
				t.Fatalf("the killed waiter acquired")
			}
		}
		// The waiter right behind the victim waited for the victim's row to
		// die: it wakes at the victim's heartbeat deadline (at most the
		// timeout after the kill) and takes the lock. The spec bounds the
		// delay by the heartbeat timeout; 500 ms more allow for a slow,
		// shared machine, far less than the poll interval (1 s) it used to
		// wait on top.
		next := acqs[victim] // Survivors 0..victim-1 come first.
		delay := next.at.Sub(killed)
		t.Logf("%s: order %v; waiter %d acquired %v after the kill (heartbeat timeout %v)", iso.Kind, order, next.k, delay, timeout)
		if next.k != victim+1 {
			t.Fatalf("waiter %d acquired after the victim's place, want %d", next.k, victim+1)
		}
		if bound := timeout + 500*time.Millisecond; delay > bound {
			t.Fatalf("waiter %d delayed %v by the dead waiter, more than the heartbeat timeout %v (+500ms allowance)", next.k, delay, timeout)
		}
		if q, err := fairqueue.Queue(ctx, iso.DB, name); err != nil || len(q) != 0 {
			t.Fatalf("live queue after the run: %v %v", q, err)
		}
	})
}
