package pessimistic_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// Environment of the helper process (this test binary, re-executed).
const (
	envHelper     = "DBLOCK_PESSIMISTIC_HELPER"
	envHelperDSN  = "DBLOCK_PESSIMISTIC_DSN"
	envHelperName = "DBLOCK_PESSIMISTIC_NAME"
)

// runHelper acquires the name, says "held" on stdout and waits to be killed.
func runHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*hangGuard)
	defer cancel()
	db, err := dialect.Open(ctx, os.Getenv(envHelperDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	l, err := pessimistic.New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if _, err := l.Acquire(ctx, os.Getenv(envHelperName)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	fmt.Println("held")
	<-ctx.Done()
	return 1
}

// TestKilledHolderProcess: a holder killed with SIGKILL frees the name as
// soon as its connection closes; another process then acquires it.
func TestKilledHolderProcess(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		name := randName(t)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envHelper+"=1", envHelperDSN+"="+iso.DSN, envHelperName+"="+name)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "held\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("helper: %q %v; stderr: %s", line, err, stderr.String())
		}
		l := newLocker(t, iso.DB, nil)
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("try while the helper holds: %v, want ErrNotAcquired", err)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		_ = cmd.Wait()
		// The spec's bound: another process acquires within a second of
		// the holder's death (the wait starts once the kill is observed).
		lease, err := l.Acquire(ctx, name, dblock.WithWait(time.Second))
		if err != nil {
			t.Fatalf("acquire within 1 s of the SIGKILL: %v", err)
		}
		t.Logf("%s: acquired %v after SIGKILL of the holder", iso.Kind, time.Since(killed))
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}

// sessionID returns the server's id of the lease's connection.
func sessionID(t *testing.T, ctx context.Context, iso *dbtest.Isolated, lease *pessimistic.Lease) int64 {
	t.Helper()
	return iso.SessionID(t, ctx, lease.Tx())
}

func waitDone(t *testing.T, lease *pessimistic.Lease) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(hangGuard):
		t.Fatalf("Done not closed")
	}
}

func serverKinds(t *testing.T, fn func(t *testing.T, iso *dbtest.Isolated)) {
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind == store.SQLite {
			t.Skip("SQLite has no server sessions")
		}
		fn(t, iso)
	})
}

// TestKilledConnection: the holder's session is killed from the server side;
// Done closes with ErrConnLost, later statements fail, and Release reports
// the loss.
func TestKilledConnection(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.Open(t)
		l := newLocker(t, db, &pessimistic.Config{WatchInterval: 50 * time.Millisecond})
		name := randName(t)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		iso.KillSession(t, ctx, sessionID(t, ctx, iso, lease))
		waitDone(t, lease)
		if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrConnLost) {
			t.Fatalf("Err: %v, want ErrLost and ErrConnLost", err)
		}
		if _, err := lease.Tx().ExecContext(ctx, "SELECT 1"); err == nil {
			t.Fatalf("statement on the dead transaction succeeded")
		}
		if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
			t.Fatalf("Release after loss: %v, want ErrLost", err)
		}
		other := newLocker(t, iso.DB, nil)
		next, err := other.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("try after the kill: %v", err)
		}
		_ = next.Release(ctx)
		// The Locker keeps one connection of its own while it is busy;
		// Close gives it back.
		if n := db.SQL().Stats().InUse; n > 1 {
			t.Fatalf("%d connections in use after release", n)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if n := db.SQL().Stats().InUse; n != 0 {
			t.Fatalf("%d connections in use after Close", n)
		}
	})
}

// TestIdleBound: a holder that stays idle past its TTL has its transaction
// ended by the server (a frozen client cannot keep the name), and Done closes.
func TestIdleBound(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind == store.MySQL && !iso.Store().MariaDB() {
			t.Skip("MySQL 8 has no idle transaction timeout")
		}
		ctx := testCtx(t)
		l := newLocker(t, iso.Open(t), &pessimistic.Config{WatchInterval: 50 * time.Millisecond})
		name := randName(t)
		lease, err := l.Acquire(ctx, name, dblock.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		waitDone(t, lease)
		if err := lease.Err(); !errors.Is(err, dblock.ErrConnLost) {
			t.Fatalf("Err: %v, want ErrConnLost", err)
		}
		other := newLocker(t, iso.DB, nil)
		next, err := other.TryAcquire(ctx, name)
		for errors.Is(err, dblock.ErrUnavailable) && ctx.Err() == nil {
			// A connection that the server was slow to open (a try waits a
			// second for one), not a holder: try again.
			next, err = other.TryAcquire(ctx, name)
		}
		if err != nil {
			t.Fatalf("try after the idle bound: %v", err)
		}
		_ = next.Release(ctx)
		_ = lease.Release(ctx)
	})
}

// TestDeadlock: two holders each lock the other's name inside their
// transaction; the database picks a victim, whose error wraps ErrDeadlock.
func TestDeadlock(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		a, b := randName(t), randName(t)
		la, err := l.Acquire(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := l.Acquire(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []struct {
			lease *pessimistic.Lease
			other string
		}{{la, b}, {lb, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = l.LockRows(ctx, c.lease.Tx(), pessimistic.LockRowsParams{
					Table: "dblock_locks", KeyColumn: "name", Keys: []any{c.other}})
				if errors.Is(errs[i], dblock.ErrDeadlock) && iso.Kind == store.MySQL {
					// MySQL rolled the victim's transaction back: its lock is gone.
					if err := c.lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrDeadlock) {
						t.Errorf("victim's lease: %v, want ErrLost and ErrDeadlock", err)
					}
				}
				if errs[i] != nil {
					// The victim gives its locks up so the other can proceed.
					_ = c.lease.Rollback(ctx)
				}
			}()
		}
		wg.Wait()
		deadlocks := 0
		for _, err := range errs {
			if errors.Is(err, dblock.ErrDeadlock) {
				deadlocks++
			} else if err != nil {
				t.Errorf("unexpected error: %v", err)
			}
		}
		if deadlocks != 1 {
			t.Fatalf("%d deadlock errors (%v), want exactly 1", deadlocks, errs)
		}
		_ = la.Release(ctx)
		_ = lb.Release(ctx)
	})
}
