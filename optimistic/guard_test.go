package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		l := newOptimistic(t, iso.DB)
		guard := func(lease *dblock.Lease) error {
			t.Helper()
			tx, err := iso.Store().BeginTxx(ctx, nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer func() { _ = tx.Rollback() }()
			if err := l.Guard(ctx, tx, lease); err != nil {
				return err
			}
			return tx.Commit()
		}

		// Held: the guard passes.
		lease, err := l.Acquire(ctx, locktest.RandomName("guard"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if err := guard(lease); err != nil {
			t.Fatalf("guard of a held lease: %v", err)
		}
		// Released: not held, and says so.
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := guard(lease); !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrReleased) {
			t.Fatalf("guard after release: %v, want ErrNotHeld and ErrReleased", err)
		}

		// Freed by an administrator before the watchdog noticed: the guard
		// finds out and ends the lease.
		lease, err = l.Acquire(ctx, locktest.RandomName("guard"), dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if ok, err := iso.Store().ForceRelease(ctx, nil, lease.Name()); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		err = guard(lease)
		if !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
			t.Fatalf("guard after force release: %v, want ErrNotHeld, ErrLost and ErrForceReleased", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatalf("lease still open after the guard found it gone")
		}
		if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
			t.Fatalf("release after loss: %v, want ErrLost", err)
		}

		// Expired.
		lease, err = l.Acquire(ctx, locktest.RandomName("guard"), dblock.WithTTL(100*time.Millisecond), dblock.WithMaxHold(100*time.Millisecond))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		<-lease.Done()
		if err := guard(lease); !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrExpired) {
			t.Fatalf("guard after expiry: %v, want ErrNotHeld and ErrExpired", err)
		}
	})
}

// TestGuardBoundsIdleTransaction (PostgreSQL): a transaction that guarded a
// lease and then idles past it, as a frozen holder's would, is ended by the
// server, and another owner acquires; the bound is local to the
// transaction, so a guarded transaction that commits leaves its pooled
// session's setting as it was.
func TestGuardBoundsIdleTransaction(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, other := newOptimistic(t, iso.DB), newOptimistic(t, iso.DB)
	name := locktest.RandomName("guard-idle")
	lease, err := l.Acquire(ctx, name, dblock.WithTTL(time.Second), dblock.WithMaxHold(time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	tx, err := iso.Store().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := l.Guard(ctx, tx, lease); err != nil {
		t.Fatalf("guard: %v", err)
	}
	// The holder freezes: tx idles with the row share-locked. The rival
	// gets the name once the server has ended tx (about a second); the
	// generous bound only guards against a wait that would never end.
	next, err := other.Acquire(ctx, name, dblock.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("rival of an idle guarded transaction: %v", err)
	}
	if next.Token() <= lease.Token() {
		t.Errorf("rival's token %d, want > %d", next.Token(), lease.Token())
	}
	if err := tx.Commit(); err == nil {
		t.Fatalf("commit of a guarded transaction the server ended: succeeded")
	}
	if err := next.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}

	// A guarded transaction that commits: the session's setting is back.
	conn, err := iso.Store().Connx(ctx)
	if err != nil {
		t.Fatalf("conn: %v", err)
	}
	defer conn.Close()
	lease, err = l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	tx2, err := conn.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := l.Guard(ctx, tx2, lease); err != nil {
		t.Fatalf("guard: %v", err)
	}
	var inTx, after string
	if err := tx2.GetContext(ctx, &inTx, "SHOW idle_in_transaction_session_timeout"); err != nil {
		t.Fatalf("show: %v", err)
	}
	if inTx == "0" {
		t.Errorf("idle_in_transaction_session_timeout inside the guarded transaction is %q, want the lease's time left", inTx)
	}
	if err := tx2.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := conn.GetContext(ctx, &after, "SHOW idle_in_transaction_session_timeout"); err != nil {
		t.Fatalf("show: %v", err)
	}
	if after != "0" {
		t.Errorf("idle_in_transaction_session_timeout after commit is %q, want the session's 0", after)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// TestGuardAfterWait: Guard waits for a transaction that holds the name's
// row (a pessimistic holder that took the name once the lease expired), and
// the lease runs out meanwhile. Guard must find it expired after the wait:
// the time it checks against is read once the row is locked, not when the
// statement started, or the caller's section would cover the pessimistic
// holder's.
func TestGuardAfterWait(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind == store.SQLite {
			t.Skip("SQLite has no row lock for Guard to wait on")
		}
		ctx := context.Background()
		l := newOptimistic(t, iso.DB)
		// Short enough to run out within the server's lock wait (MariaDB
		// and MySQL bound it in whole seconds, this pool at one).
		ttl := 300 * time.Millisecond
		lease, err := l.Acquire(ctx, locktest.RandomName("guard"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		defer func() { _ = lease.Release(ctx) }()
		holder, err := iso.Store().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if rl, err := iso.Store().LockRow(ctx, holder, lease.Name(), store.RowLockParams{NoWait: true}); err != nil || !rl.Found {
			t.Fatalf("lock the row: %+v, %v", rl, err)
		}
		tx, err := iso.Store().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		guarded := make(chan error, 1)
		go func() { guarded <- l.Guard(ctx, tx, lease) }()
		iso.WaitExpired(t, ctx, lease.Name())
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-guarded; !errors.Is(err, dblock.ErrNotHeld) {
			t.Fatalf("guard of a lease that expired while it waited: %v, want ErrNotHeld", err)
		}
	})
}

// TestGuardSessionGone: the server ended the session of the transaction
// Guard runs in (as after an idle timeout while the holder was frozen).
// Guard cannot read the row: it says the database is unavailable, not that
// the lease is lost, and leaves the lease held; a new transaction's guard
// passes.
func TestGuardSessionGone(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := newOptimistic(t, iso.DB)
			lease, err := l.Acquire(ctx, locktest.RandomName("guard-gone"))
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			tx, err := iso.Store().BeginTxx(ctx, nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer func() { _ = tx.Rollback() }()
			session, kill, alive := "SELECT pg_backend_pid()", "SELECT pg_terminate_backend($1)",
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
			if kind == store.MySQL {
				session, kill, alive = "SELECT CONNECTION_ID()", "KILL ?",
					"SELECT count(*) FROM information_schema.processlist WHERE id = ?"
			}
			var id int64
			if err := tx.GetContext(ctx, &id, session); err != nil {
				t.Fatalf("session id: %v", err)
			}
			if _, err := iso.Store().ExecContext(ctx, kill, id); err != nil {
				t.Fatalf("end the session: %v", err)
			}
			for n := 1; n > 0; time.Sleep(10 * time.Millisecond) {
				// Until the server has ended it (ctx bounds the loop).
				if err := iso.Store().GetContext(ctx, &n, alive, id); err != nil {
					t.Fatalf("session gone yet: %v", err)
				}
			}
			err = l.Guard(ctx, tx, lease)
			if !errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, dblock.ErrNotHeld) {
				t.Fatalf("guard in an ended session: %v, want ErrUnavailable and not ErrNotHeld", err)
			}
			select {
			case <-lease.Done():
				t.Fatalf("lease ended by a guard that could not read: %v", lease.Err())
			default:
			}
			tx2, err := iso.Store().BeginTxx(ctx, nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer func() { _ = tx2.Rollback() }()
			if err := l.Guard(ctx, tx2, lease); err != nil {
				t.Fatalf("guard in a new transaction: %v", err)
			}
			if err := tx2.Commit(); err != nil {
				t.Fatalf("commit: %v", err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}
