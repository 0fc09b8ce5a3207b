package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// stopHolder is the worker body of TestFaultSIGSTOPLeaseHolder: it acquires
// name with a renewed lease and then, every 20 ms, writes its token into
// fenced_writes in a transaction guarded by optimistic.Guard, printing
// "held TOKEN", then "lost ERR" when the lease reports its loss and
// "rejected ERR" when a write is refused (after which it waits up to 10 s
// for the loss report, if there was none yet, and stops). A guard that finds
// its transaction's session gone (ErrUnavailable) is retried on a new one.
func stopHolder(ctx context.Context, db *dialect.DB, name string, ttl time.Duration) int {
	l, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	fmt.Println("ready")
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lease, err := l.Acquire(actx, name, dblock.WithTTL(ttl))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("held %d\n", lease.Token())
	q := "INSERT INTO fenced_writes (token) VALUES (" + store.Of(db).Dialect.Placeholder(1) + ")"
	reportedLoss := false
	for ctx.Err() == nil {
		if !reportedLoss {
			select {
			case <-lease.Done():
				fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(lease.Err()), "\n", " "))
				reportedLoss = true
			default:
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		tx, err := store.Of(db).BeginTxx(wctx, nil)
		if err == nil {
			switch gerr := l.Guard(wctx, tx, lease); {
			case errors.Is(gerr, dblock.ErrUnavailable):
				// The freeze landed inside this transaction and the
				// server ended its session: the write is refused, and
				// an application retries on a new one, as here.
				_ = tx.Rollback()
			case gerr != nil:
				_ = tx.Rollback()
				wcancel()
				fmt.Printf("rejected %v\n", strings.ReplaceAll(gerr.Error(), "\n", " "))
				if !reportedLoss {
					select {
					case <-lease.Done():
						fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(lease.Err()), "\n", " "))
					case <-time.After(10 * time.Second):
						fmt.Println("lost never reported")
					}
				}
				return 0
			default:
				if _, err = tx.ExecContext(wctx, q, int64(lease.Token())); err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
		}
		wcancel()
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// TestFaultSIGSTOPLeaseHolder freezes (SIGSTOP) a process that holds a
// renewed 1 s lease and keeps writing guarded, fenced rows, for 3 s. A rival
// acquires the name meanwhile (with a greater token) and writes. When the
// holder is resumed (SIGCONT) it must find its lease lost, and its next
// guarded write must be refused: no row with the old token is written after
// the rival's first row.
func TestFaultSIGSTOPLeaseHolder(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ddl := "CREATE TABLE fenced_writes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, token bigint NOT NULL)"
			dsn := iso.DSN
			if kind == store.MySQL {
				ddl = "CREATE TABLE fenced_writes (id bigint AUTO_INCREMENT PRIMARY KEY, token bigint NOT NULL)"
				// The freeze may land inside a guarded transaction, whose
				// share lock blocks the rival until the server ends it: on
				// MariaDB the application bounds it, as Guard's doc says.
				dsn = withDSNParam(dsn, "idle_transaction_timeout=1")
			}
			if _, err := iso.Store().ExecContext(ctx, ddl); err != nil {
				t.Fatal(err)
			}
			const ttl = time.Second
			p := startWorker(t, "stopped", map[string]string{
				"FAULTS_DSN": dsn, "FAULTS_ROLE": "stophold", "FAULTS_NAME": "frozen",
				"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "60s",
			})
			var oldTok int64
			select {
			case line := <-p.lines:
				if _, err := fmt.Sscanf(line, "held %d", &oldTok); err != nil {
					t.Fatalf("worker said %q", line)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the worker did not acquire the name")
			}
			time.Sleep(200 * time.Millisecond)
			got, rivalAt, stoppedAt, resume := freezeForRival(t, iso, p, "frozen", 3*ttl)
			if got == nil {
				t.Fatal("the rival never got the name from the frozen holder")
			}
			if int64(got.Token()) <= oldTok {
				t.Fatalf("rival token %d is not greater than the frozen holder's %d", got.Token(), oldTok)
			}
			var rivalFirst int64
			if err := iso.Store().GetContext(ctx, &rivalFirst, iso.Store().Rebind("INSERT INTO fenced_writes (token) VALUES (?) RETURNING id"), int64(got.Token())); err != nil {
				// MySQL has no RETURNING on INSERT.
				res, err := iso.Store().ExecContext(ctx, "INSERT INTO fenced_writes (token) VALUES (?)", int64(got.Token()))
				if err != nil {
					t.Fatal(err)
				}
				if rivalFirst, err = res.LastInsertId(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2 * time.Second)
			resume()
			var lost, rejected string
			deadline := time.After(20 * time.Second)
			for rejected == "" || lost == "" {
				select {
				case line := <-p.lines:
					switch {
					case strings.HasPrefix(line, "lost "):
						lost = line
					case strings.HasPrefix(line, "rejected "):
						rejected = line
					}
				case <-deadline:
					t.Fatalf("the resumed holder did not both report its loss and have a write refused within 20 s (lost: %q, rejected: %q)", lost, rejected)
				}
			}
			if !strings.Contains(rejected, "not held") {
				t.Errorf("refusal %q does not say the lock is not held", rejected)
			}
			if !strings.Contains(lost, "lost") || strings.Contains(lost, "never") || strings.Contains(lost, "<nil>") {
				t.Errorf("loss report %q does not say the lease was lost", lost)
			}
			var late int
			if err := iso.Store().GetContext(ctx, &late, iso.Store().Rebind("SELECT count(*) FROM fenced_writes WHERE token = ? AND id > ?"), oldTok, rivalFirst); err != nil {
				t.Fatal(err)
			}
			if late != 0 {
				t.Fatalf("%d writes with the old token %d committed after the rival's first write", late, oldTok)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatal("test ran out of time")
			}
			t.Logf("a rival got the name %v after SIGSTOP (TTL %v); resumed holder: %s; %s",
				rivalAt.Sub(stoppedAt).Round(time.Millisecond), ttl, lost, rejected)
		})
	}
}

// stopPessimisticHolder is the worker body of
// TestFaultSIGSTOPPessimisticHolder: it takes name in pessimistic mode (the
// server ends its transaction once idle past ttl), prints "held", then
// waits for Done() and prints "lost ERR", then "release ERR" (Release's
// answer).
func stopPessimisticHolder(ctx context.Context, db *dialect.DB, name string, ttl time.Duration) int {
	l, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	fmt.Println("ready")
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lease, err := l.Acquire(actx, name, dblock.WithTTL(ttl))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("held 0")
	select {
	case <-lease.Done():
		fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(lease.Err()), "\n", " "))
	case <-ctx.Done():
		return 0
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	fmt.Printf("release %v\n", strings.ReplaceAll(fmt.Sprint(lease.Release(rctx)), "\n", " "))
	return 0
}

// TestFaultSIGSTOPPessimisticHolder freezes (SIGSTOP) a process holding a
// pessimistic lock with a 2 s TTL. Its connection stays open, so only the
// server can end its transaction (idle past the TTL): a rival on a direct
// connection must get the name within TTL + 3 s. After SIGCONT the holder
// must see Done() close with ErrLost, and Release must say the lock was lost.
func TestFaultSIGSTOPPessimisticHolder(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			const ttl = 2 * time.Second
			p := startWorker(t, "stopped-tx", map[string]string{
				"FAULTS_DSN": iso.DSN, "FAULTS_ROLE": "stoppess", "FAULTS_NAME": "frozen-tx",
				"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "60s",
			})
			select {
			case line := <-p.lines:
				if line != "held 0" {
					t.Fatalf("worker said %q", line)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the worker did not acquire the name")
			}
			got, at, stoppedAt, resume := freezeForRival(t, iso, p, "frozen-tx", ttl+3*time.Second)
			if got == nil {
				t.Fatalf("the frozen pessimistic holder still has the name %v later (TTL %v): the server did not end its transaction", ttl+3*time.Second, ttl)
			}
			freedAfter := at.Sub(stoppedAt)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			resume()
			resumedAt := time.Now()
			var lost, release string
			var lostAfter time.Duration
			deadline := time.After(20 * time.Second)
			for release == "" {
				select {
				case line := <-p.lines:
					switch {
					case strings.HasPrefix(line, "lost "):
						lost, lostAfter = line, time.Since(resumedAt)
					case strings.HasPrefix(line, "release "):
						release = line
					}
				case <-deadline:
					t.Fatalf("the resumed holder did not report its loss within 20 s (lost: %q)", lost)
				}
			}
			if !strings.Contains(lost, "lost") || strings.Contains(lost, "<nil>") {
				t.Errorf("loss report %q does not say the lock was lost", lost)
			}
			if !strings.Contains(release, "lost") {
				t.Errorf("Release after the loss said %q, want the loss", release)
			}
			t.Logf("the server freed the frozen holder's name %v after SIGSTOP (TTL %v); after SIGCONT the holder reported %q %v later; %s",
				freedAfter.Round(time.Millisecond), ttl, lost, lostAfter.Round(time.Millisecond), release)
		})
	}
}

// TestFaultTCPKeepalives checks that a dblock session on PostgreSQL asks
// the server to probe the client's TCP connection (tcp_keepalives_idle,
// _interval, _count), so a vanished client's session, and any row lock it
// held, ends: the defaults (10 s, 5 s, 3), and a DSN's own values.
// MariaDB has no per-session keepalive setting: there a frozen pessimistic
// holder is bounded by idle_transaction_timeout (TestFaultSIGSTOPPessimisticHolder).
func TestFaultTCPKeepalives(t *testing.T) {
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	show := func(db *dialect.DB) [3]string {
		t.Helper()
		var v [3]string
		for i, k := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count"} {
			if err := store.Of(db).GetContext(ctx, &v[i], "SHOW "+k); err != nil {
				t.Fatalf("SHOW %s: %v", k, err)
			}
		}
		return v
	}
	if !strings.Contains(iso.DSN, "@127.0.0.1:") && !strings.Contains(iso.DSN, "@localhost:") {
		ciRequired(t, "the PostgreSQL test server is not reached over TCP (%s): keepalives do not apply", store.Redact(iso.DSN))
	}
	if got, want := show(iso.DB), [3]string{"10", "5", "3"}; got != want {
		t.Errorf("a dblock session's keepalives (idle, interval, count) = %v, want the defaults %v", got, want)
	}
	// The pessimistic lock's own session.
	pl, err := pessimistic.New(iso.DB, &pessimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	lease, err := pl.Acquire(ctx, "keepalive")
	if err != nil {
		t.Fatal(err)
	}
	var idle string
	if err := lease.Tx().QueryRowContext(ctx, "SHOW tcp_keepalives_idle").Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle != "10" {
		t.Errorf("the pessimistic lock's session has tcp_keepalives_idle = %s, want 10", idle)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	own := openPG(t, withDSNParam(iso.DSN, "tcp_keepalives_idle=1&tcp_keepalives_interval=1&tcp_keepalives_count=2"))
	if got, want := show(own), [3]string{"1", "1", "2"}; got != want {
		t.Errorf("keepalives with the DSN's values = %v, want %v", got, want)
	}
}

// guardStopHolder is the worker body of TestFaultSIGSTOPInsideGuard: it
// takes name with a renewed lease, begins a transaction, guards it
// (optimistic.Guard), inserts its token into fenced_writes, prints
// "guarded TOKEN" and sleeps 2 s (the parent freezes it there), then
// commits, printing "commit ERR", and waits up to 10 s for the lease to
// report its loss ("lost ERR").
func guardStopHolder(ctx context.Context, db *dialect.DB, name string, ttl time.Duration) int {
	l, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	fmt.Println("ready")
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lease, err := l.Acquire(actx, name, dblock.WithTTL(ttl))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	tx, err := store.Of(db).BeginTxx(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := l.Guard(ctx, tx, lease); err != nil {
		fmt.Fprintln(os.Stderr, "guard:", err)
		return 2
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO fenced_writes (token) VALUES ("+store.Of(db).Dialect.Placeholder(1)+")", int64(lease.Token())); err != nil {
		fmt.Fprintln(os.Stderr, "insert:", err)
		return 2
	}
	fmt.Printf("guarded %d\n", lease.Token())
	time.Sleep(2 * time.Second)
	fmt.Printf("commit %v\n", strings.ReplaceAll(fmt.Sprint(tx.Commit()), "\n", " "))
	select {
	case <-lease.Done():
		fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(lease.Err()), "\n", " "))
	case <-time.After(10 * time.Second):
		fmt.Println("lost never reported")
	}
	return 0
}

// TestFaultSIGSTOPInsideGuard freezes (SIGSTOP) a holder of a renewed 2 s
// lease between optimistic.Guard and Commit, with a guarded row written.
// Guard's share lock on the lease row blocks any takeover, so only the
// server can free the name: on PostgreSQL Guard bounds the transaction by
// the lease's time left (idle_in_transaction_session_timeout); on MariaDB,
// where Guard cannot bound one transaction, the application's sessions set
// idle_transaction_timeout themselves (here in the DSN, 2 s, as Guard's
// documentation recommends). A rival must get the name within TTL + 3 s;
// after SIGCONT the holder's Commit must fail, the guarded row must not be
// there, and the lease must report its loss.
func TestFaultSIGSTOPInsideGuard(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ddl := "CREATE TABLE fenced_writes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, token bigint NOT NULL)"
			dsn := iso.DSN
			if kind == store.MySQL {
				ddl = "CREATE TABLE fenced_writes (id bigint AUTO_INCREMENT PRIMARY KEY, token bigint NOT NULL)"
				dsn = withDSNParam(dsn, "idle_transaction_timeout=2")
			}
			if _, err := iso.Store().ExecContext(ctx, ddl); err != nil {
				t.Fatal(err)
			}
			const ttl = 2 * time.Second
			p := startWorker(t, "guard-stopped", map[string]string{
				"FAULTS_DSN": dsn, "FAULTS_ROLE": "guardstop", "FAULTS_NAME": "frozen-guard",
				"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "60s",
			})
			var tok int64
			select {
			case line := <-p.lines:
				if _, err := fmt.Sscanf(line, "guarded %d", &tok); err != nil {
					t.Fatalf("worker said %q", line)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the worker did not guard a transaction")
			}
			got, at, stoppedAt, resume := freezeForRival(t, iso, p, "frozen-guard", ttl+3*time.Second)
			if got == nil {
				t.Fatalf("the holder frozen inside its guarded transaction still blocks the name %v later (TTL %v)", ttl+3*time.Second, ttl)
			}
			freedAfter := at.Sub(stoppedAt)
			if int64(got.Token()) <= tok {
				t.Errorf("rival token %d is not above the frozen holder's %d", got.Token(), tok)
			}
			resume()
			var commit, lost string
			deadline := time.After(20 * time.Second)
			for lost == "" {
				select {
				case line := <-p.lines:
					switch {
					case strings.HasPrefix(line, "commit "):
						commit = line
					case strings.HasPrefix(line, "lost "):
						lost = line
					}
				case <-deadline:
					t.Fatalf("the resumed holder did not finish within 20 s (commit: %q)", commit)
				}
			}
			if commit == "" || commit == "commit <nil>" {
				t.Errorf("the resumed holder's guarded transaction committed (%q) after a rival took the name", commit)
			}
			if !strings.Contains(lost, "lost") || strings.Contains(lost, "never") {
				t.Errorf("loss report %q", lost)
			}
			var n int
			if err := iso.Store().GetContext(ctx, &n, iso.Store().Rebind("SELECT count(*) FROM fenced_writes WHERE token = ?"), tok); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%d guarded rows of the frozen holder (token %d) were committed", n, tok)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("the server ended the frozen guarded transaction: a rival got the name %v after SIGSTOP (TTL %v); resumed holder: %s; %s",
				freedAfter.Round(time.Millisecond), ttl, commit, lost)
		})
	}
}

// withDSNParam appends the query parameter kv (key=value) to dsn.
func withDSNParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// freezeForRival stops the worker p (SIGSTOP) and lets a rival optimistic
// Locker on iso poll for name for up to within. It returns the rival's lease
// (nil if it got none in time), when it got it, when p was stopped, and
// resume, which sends p SIGCONT; a worker the test did not resume is resumed
// at cleanup, before the worker itself is stopped.
func freezeForRival(t *testing.T, iso *dbtest.Isolated, p *proc, name string, within time.Duration) (got *dblock.Lease, at, stoppedAt time.Time, resume func()) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt = time.Now()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) })
	resume = func() {
		t.Helper()
		var err error
		once.Do(func() { err = syscall.Kill(pid, syscall.SIGCONT) })
		if err != nil {
			t.Fatal(err)
		}
	}
	rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rival.Close() })
	got, at = pollAcquire(t, rival, name, within)
	return got, at, stoppedAt, resume
}
