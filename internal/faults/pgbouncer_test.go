package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// startPgBouncer runs a PgBouncer (transaction pooling) on a loopback port in
// front of pg, as pg's OS user, with its config in a temp dir; it is
// stopped by PID at cleanup. It returns a dblock DSN through it.
func startPgBouncer(t *testing.T, pg *pgInstance) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		ciRequired(t, "pgbouncer is not installed (apt-get install -y pgbouncer)")
	}
	dir := sharedTempDir(t, pg.user)
	port := freePort(t)
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%d dbname=postgres user=postgres
; Any other database name: the same server, that database.
* = host=127.0.0.1 port=%[1]d user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 400
default_pool_size = 10
; Many databases (one per conformance check) share the server: cap the
; server connections of the user across them (clients queue instead of
; failing), and close idle ones of finished checks soon.
max_user_connections = 60
server_idle_timeout = 5
; dblock asks PostgreSQL for TCP keepalives in the startup packet; PgBouncer
; refuses startup parameters it does not know unless told to ignore them.
ignore_startup_parameters = extra_float_digits,tcp_keepalives_idle,tcp_keepalives_interval,tcp_keepalives_count
logfile = %s
pidfile = %s
`, pg.port, port, filepath.Join(dir, "userlist.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", "-u", pg.user, "--", bin, ini)
	} else {
		cmd = exec.Command(bin, ini)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out := &lockedWriter{w: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// runuser and pgbouncer share a process group of their own.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	// Wait until it accepts connections.
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	end := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited: %s\n%s", out.String(), tail(string(log), 2000))
		default:
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.Close()
			return dsn
		}
		if time.Now().After(end) {
			t.Fatalf("pgbouncer not listening after 20 s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bouncerElection: through PgBouncer in transaction mode a candidate is
// elected, a second one waits, the leader resigns and the second is elected
// in a later term (its LISTEN session cannot be held, so it polls), and an
// observer saw both terms in order.
func bouncerElection(ctx context.Context, t *testing.T, db *dialect.DB) {
	cfg := &election.Config{TTL: 5 * time.Second, ObserveInterval: 50 * time.Millisecond, Logger: quiet}
	cands := make([]*election.Election, 3)
	for i := range cands {
		e, err := election.New(db, "bouncer-election", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		cands[i] = e
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := cands[2].Observe(octx)
	first, err := cands[0].Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("campaign through PgBouncer: %v", err)
	}
	won := make(chan *dblock.Lease, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		term, err := cands[1].Campaign(wctx, "b")
		if err != nil {
			t.Errorf("second campaign: %v", err)
		}
		won <- term
	}()
	time.Sleep(300 * time.Millisecond)
	if was, err := cands[0].Resign(ctx); err != nil || !was {
		t.Fatalf("resign through PgBouncer: %v %v", was, err)
	}
	second := <-won
	if second == nil || second.Token() <= first.Token() {
		t.Fatalf("second term %v is not after the first, %d", second, first.Token())
	}
	for l := range seen {
		if l.Term < first.Token() {
			t.Fatalf("observer saw term %d before the first, %d", l.Term, first.Token())
		}
		if l.Term == second.Token() {
			return
		}
	}
	t.Fatal("the observer's stream ended before the second term")
}

// TestFaultPgBouncer runs dblock through PgBouncer in transaction pooling
// mode. PgBouncer 1.18 (Debian 12) does not support named prepared
// statements across transactions, so the DSN selects pgx's exec mode
// (default_query_exec_mode=exec: unnamed statements). Optimistic and fair
// locks acquire, exclude and release; a waiter whose LISTEN session cannot be
// held (transaction pooling) still gets the name by polling, without errors;
// the pessimistic callback form runs its critical section in the locking
// transaction.
func TestFaultPgBouncer(t *testing.T) {
	pg := newPrimary(t)
	migrate(t, openPG(t, pg.DSN()))
	dsn := startPgBouncer(t, pg) + "&default_query_exec_mode=exec"
	db := openPG(t, dsn)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	opt, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	fair, err := fairqueue.New(db, &fairqueue.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fair.Close()

	for _, m := range []struct {
		name string
		l    dblock.Locker
	}{{"optimistic", opt}, {"fair", fair}} {
		t.Run(m.name, func(t *testing.T) {
			name := "bouncer-" + m.name
			lease, err := m.l.Acquire(ctx, name, dblock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatalf("acquire through PgBouncer: %v", err)
			}
			if _, err := m.l.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("second TryAcquire = %v, want ErrNotAcquired", err)
			}
			got := make(chan error, 1)
			go func() {
				wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
				defer wcancel()
				l2, err := m.l.Acquire(wctx, name, dblock.WithTTL(5*time.Second), dblock.WithMaxHold(5*time.Second))
				if err == nil {
					err = l2.Release(wctx)
				}
				got <- err
			}()
			time.Sleep(300 * time.Millisecond)
			released := time.Now()
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("release through PgBouncer: %v", err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("waiter never acquired after the release")
			}
			t.Logf("%s: waiter acquired %v after the release", m.name, time.Since(released).Round(time.Millisecond))
		})
	}

	t.Run("election", func(t *testing.T) { bouncerElection(ctx, t, db) })

	t.Run("pessimistic callback", func(t *testing.T) {
		pl, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer pl.Close()
		if _, err := db.SQL().ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bouncer_work (id int PRIMARY KEY, n int NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL().ExecContext(ctx, "INSERT INTO bouncer_work VALUES (1, 0) ON CONFLICT DO NOTHING"); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			err := pl.Do(ctx, "bouncer-tx", func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE bouncer_work SET n = n + 1 WHERE id = 1")
				return err
			})
			if err != nil {
				t.Fatalf("pessimistic Do through PgBouncer: %v", err)
			}
		}
		var n int
		if err := store.Of(db).GetContext(ctx, &n, "SELECT n FROM bouncer_work WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if n != 5 {
			t.Fatalf("critical sections committed %d updates, want 5", n)
		}
		// While one transaction holds the name, another TryAcquire is refused.
		l, err := pl.Acquire(ctx, "bouncer-tx")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := opt.TryAcquire(ctx, "bouncer-tx"); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("optimistic TryAcquire of a pessimistically held name = %v, want ErrNotAcquired", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFaultPgBouncerConformance runs the conformance suite of the optimistic
// and fair modes through PgBouncer in transaction pooling mode: every check
// on a fresh database of a private PostgreSQL, migrated directly and used
// only through PgBouncer (DSN with default_query_exec_mode=exec). LISTEN
// cannot deliver there, so every wait relies on polling and expiry.
func TestFaultPgBouncerConformance(t *testing.T) {
	// Room for PgBouncer's 60 and the direct pools that migrate each database.
	pg := newPrimary(t, "max_connections = 200")
	admin := openPG(t, pg.DSN())
	bouncer := startPgBouncer(t, pg)
	var seq atomic.Int64
	newIso := func(t *testing.T) *dbtest.Isolated {
		t.Helper()
		name := fmt.Sprintf("conf_%d", seq.Add(1))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := admin.SQL().ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
		direct := strings.Replace(pg.DSN(), "/postgres?", "/"+name+"?", 1)
		migrate(t, openPG(t, direct))
		dsn := strings.Replace(bouncer, "/postgres?", "/"+name+"?", 1) + "&default_query_exec_mode=exec"
		return &dbtest.Isolated{Kind: store.Postgres, DSN: dsn, DB: openPG(t, dsn)}
	}
	t.Run("optimistic", func(t *testing.T) {
		locktest.RunOn(t, newIso, func(t *testing.T, iso *dbtest.Isolated) dblock.Locker {
			l, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, locktest.Caps{Lease: true, Reentrant: true, Fencing: true})
	})
	t.Run("fair", func(t *testing.T) {
		locktest.RunOn(t, newIso, func(t *testing.T, iso *dbtest.Isolated) dblock.Locker {
			l, err := fairqueue.New(iso.DB, &fairqueue.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, locktest.Caps{Lease: true, Reentrant: true, Fencing: true})
	})
}
