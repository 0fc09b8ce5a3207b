package pessimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestSessionIdentity: what the session watcher asks the server. A live
// lock's session belongs to the incarnation learned on another connection
// and is alive there; a lock taken before that incarnation started (its id
// now reused after a restart) or on another server (MySQL @@server_id) does
// not belong to it; on PostgreSQL a session under the same pid in another
// transaction, or in none, is not the holder (a pid reused, or the locking
// transaction ended behind dblock's back).
func TestSessionIdentity(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.DB
		name := randName(t)
		if err := store.Of(db).EnsureRow(ctx, nil, name); err != nil {
			t.Fatalf("ensure row: %v", err)
		}
		holder, err := store.Of(db).Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		tx, err := holder.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		rl, err := store.Of(db).LockRow(ctx, tx, name, store.RowLockParams{NoWait: true})
		if err != nil || !rl.Found {
			t.Fatalf("lock row: found=%v err=%v", rl.Found, err)
		}
		ref := rl.Session
		side, err := store.Of(db).Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer side.Close()
		inc, err := store.Of(db).ServerIncarnation(ctx, side)
		if err != nil {
			t.Fatalf("incarnation: %v", err)
		}
		if inc.Started.After(ref.At) || ref.At.After(inc.Learned) {
			t.Fatalf("incarnation started %v, learned %v; lock taken at %v", inc.Started, inc.Learned, ref.At)
		}
		if iso.Kind == store.Postgres || store.Of(db).MariaDB() {
			var startUs int64
			if iso.Kind == store.Postgres {
				err = side.GetContext(ctx, &startUs, "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint")
			} else {
				err = side.GetContext(ctx, &startUs, "SELECT CAST(UNIX_TIMESTAMP() - VARIABLE_VALUE AS SIGNED) * 1000000 FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'")
			}
			if err != nil {
				t.Fatalf("server start: %v", err)
			}
			// PostgreSQL: exact. MariaDB: the whole second of the start;
			// Started bounds its end (a second more when the two
			// statements straddled a second).
			start := store.Micros(startUs)
			if iso.Kind == store.Postgres && !inc.Started.Equal(start) ||
				iso.Kind == store.MySQL && (inc.Started.Before(start.Add(time.Second)) || inc.Started.After(start.Add(2*time.Second))) {
				t.Fatalf("incarnation started %v; the server says %v", inc.Started, start)
			}
		}

		alive := func(refs ...store.SessionRef) []bool {
			t.Helper()
			got, err := store.Of(db).SessionsAlive(ctx, side, refs)
			if err != nil {
				t.Fatalf("sessions alive: %v", err)
			}
			return got
		}
		// The id of a lock taken before the server started, or on another
		// server, means nothing on this incarnation.
		before := ref
		before.At = inc.Started.Add(-time.Microsecond)
		other := ref
		other.Server++
		for _, c := range []struct {
			what string
			ref  store.SessionRef
			want bool
		}{
			{"the holder's session", ref, true},
			{"a lock taken before the server started", before, false},
			{"a lock taken on another server", other, false},
		} {
			if got := inc.Covers(c.ref); got != c.want {
				t.Errorf("%s: covered=%v, want %v", c.what, got, c.want)
			}
		}
		otherTx := ref
		otherTx.TxStart = ref.TxStart.Add(time.Microsecond)
		got := alive(ref, otherTx)
		if !got[0] {
			t.Errorf("the holder's session is not found alive")
		}
		if want := iso.Kind == store.MySQL; got[1] != want {
			t.Errorf("the holder's id in another transaction: alive=%v, want %v", got[1], want)
		}
		if iso.Kind == store.Postgres {
			// Ended behind dblock's back, in no transaction, then in another.
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := alive(ref); got[0] {
				t.Errorf("a session in no transaction is taken for the locking one")
			}
			tx2, err := holder.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx2.Rollback() }()
			if _, err := tx2.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			if got := alive(ref); got[0] {
				t.Errorf("a session in another transaction is taken for the locking one")
			}
		}
	})
}

// TestWatcherLockingTxEnded (PostgreSQL): the locking transaction ended
// behind dblock's back, its session (same pid) now in another transaction:
// the watcher reports the loss, as it would for a pid reused by a new
// session.
func TestWatcherLockingTxEnded(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx := testCtx(t)
	l := newLocker(t, iso.DB, &pessimistic.Config{WatchInterval: 20 * time.Millisecond})
	lease, err := l.Acquire(ctx, randName(t))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := lease.Tx().ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("commit behind the lock's back: %v", err)
	}
	if _, err := lease.Tx().ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatalf("begin another transaction: %v", err)
	}
	waitDone(t, lease)
	if err := lease.Err(); !errors.Is(err, dblock.ErrConnLost) {
		t.Fatalf("Err: %v, want ErrConnLost", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Release: %v, want ErrLost", err)
	}
}

// TestWatcherSideReconnect: the Locker's own connection is killed while a
// lock is held; the watcher opens another, learns the server's incarnation
// on it and finds the holder alive (no false loss, although the lock was
// taken before that connection existed); then the holder's session is
// killed, and the loss is reported.
func TestWatcherSideReconnect(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		adm, err := iso.Store().Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		// Only this test's sessions: on PostgreSQL the tests share one
		// database (a schema each, also each pool's application_name); on
		// MySQL each test has a database.
		list := "SELECT pid FROM pg_stat_activity WHERE application_name = current_setting('application_name')"
		kill := "SELECT pg_terminate_backend($1)"
		if iso.Kind == store.MySQL {
			list = "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
			kill = "KILL ?"
		}
		sessions := func() map[int64]bool {
			t.Helper()
			var ids []int64
			if err := adm.SelectContext(ctx, &ids, list); err != nil {
				t.Fatalf("list sessions: %v", err)
			}
			m := map[int64]bool{}
			for _, id := range ids {
				m[id] = true
			}
			return m
		}
		before := sessions() // The test's own, which stay.

		db := iso.Open(t)
		l := newLocker(t, db, &pessimistic.Config{WatchInterval: 20 * time.Millisecond})
		passes := make(chan error, 64)
		pessimistic.SetTestHooks(l, pessimistic.TestHooks{Watched: func(err error) {
			select {
			case passes <- err:
			default: // The test reads a few passes only.
			}
		}})
		lease, err := l.Acquire(ctx, randName(t))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		holder := sessionID(t, ctx, iso, lease)
		next := func() error {
			t.Helper()
			select {
			case err := <-passes:
				return err
			case <-time.After(hangGuard):
				t.Fatalf("no watcher pass")
				return nil
			}
		}
		if err := next(); err != nil {
			t.Fatalf("watcher pass before the kill: %v", err)
		}
		// The Locker's other sessions: its own connection, and any idle
		// in its pool.
		killed := 0
		for id := range sessions() {
			if before[id] || id == holder {
				continue
			}
			if _, err := adm.ExecContext(ctx, kill, id); err != nil {
				t.Fatalf("kill %d: %v", id, err)
			}
			killed++
		}
		if killed == 0 {
			t.Fatalf("no session of the Locker's own connection found")
		}
		// A pass fails on the killed connection; then passes on a new one
		// must find the holder alive.
		for i := 0; ; i++ {
			if i > 1000 {
				t.Fatalf("no watcher pass failed after its connection was killed")
			}
			if next() != nil {
				break
			}
		}
		for ok := 0; ok < 3; {
			if err := next(); err == nil {
				ok++
			}
		}
		if err := lease.Err(); err != nil {
			t.Fatalf("the lock was declared lost after the watcher's connection was replaced: %v", err)
		}
		if _, err := adm.ExecContext(ctx, kill, holder); err != nil {
			t.Fatalf("kill the holder: %v", err)
		}
		waitDone(t, lease)
		if err := lease.Err(); !errors.Is(err, dblock.ErrConnLost) {
			t.Fatalf("Err: %v, want ErrConnLost", err)
		}
		_ = lease.Release(context.WithoutCancel(ctx))
	})
}
