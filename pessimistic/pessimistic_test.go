package pessimistic_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// hangGuard bounds every wait in these tests; it is a guard against hangs,
// never a timing assertion.
const hangGuard = 60 * time.Second

func randName(t *testing.T) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "test:" + t.Name() + ":" + hex.EncodeToString(b[:])
}

func newLocker(t *testing.T, db *dialect.DB, cfg *pessimistic.Config) *pessimistic.Locker {
	t.Helper()
	l, err := pessimistic.New(db, cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func TestAcquireTryRelease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l1 := newLocker(t, iso.DB, nil)
		l2 := newLocker(t, iso.Open(t), nil)
		name := randName(t)

		lease, err := l1.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("first try: %v", err)
		}
		if lease.Name() != name || lease.Mode() != dblock.ModePessimistic || lease.Reentry() != 1 {
			t.Fatalf("lease: name %q mode %q reentry %d", lease.Name(), lease.Mode(), lease.Reentry())
		}
		_, err = l2.TryAcquire(ctx, name)
		var he *dblock.HeldError
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.As(err, &he) {
			t.Fatalf("second try: want not acquired with a HeldError, got %v", err)
		}
		_, err = l2.Acquire(ctx, name, dblock.WithWait(50*time.Millisecond))
		if !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("bounded wait: want not acquired, got %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("done not closed after release")
		}
		if err := lease.Release(ctx); !errors.Is(err, dblock.ErrReleased) {
			t.Fatalf("second release: want ErrReleased, got %v", err)
		}
		lease2, err := l2.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("try after release: %v", err)
		}
		if err := lease2.Rollback(ctx); err != nil {
			t.Fatalf("rollback: %v", err)
		}
	})
}

func TestAcquireWaitsForHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l1 := newLocker(t, iso.DB, nil)
		l2 := newLocker(t, iso.Open(t), nil)
		name := randName(t)
		lease, err := l1.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := l2.Acquire(ctx, name)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("waiter returned while the lock was held: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}

func TestReentrant(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		other := newLocker(t, iso.Open(t), nil)
		name := randName(t)
		a, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		b, err := l.TryAcquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatalf("reenter: %v", err)
		}
		if b.Reentry() != 2 || b.Tx() != a.Tx() {
			t.Fatalf("reentry %d, same tx %v", b.Reentry(), b.Tx() == a.Tx())
		}
		// Another owner in the same process does not re-enter.
		if _, err := l.TryAcquire(ctx, name, dblock.WithOwner("you")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("other owner: want not acquired, got %v", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatalf("release inner: %v", err)
		}
		if _, err := other.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("after inner release: want still held, got %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("release outer: %v", err)
		}
		c, err := other.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("after outer release: %v", err)
		}
		_ = c.Release(ctx)
	})
}

func TestDoCommitRollbackPanic(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		if _, err := iso.Store().ExecContext(ctx, "CREATE TABLE p_counter (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
			t.Fatalf("create: %v", err)
		}
		if _, err := iso.Store().ExecContext(ctx, "INSERT INTO p_counter (id, n) VALUES (1, 0)"); err != nil {
			t.Fatalf("insert: %v", err)
		}
		bump := func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE p_counter SET n = n + 1 WHERE id = 1")
			return err
		}
		read := func() int {
			var n int
			if err := iso.Store().GetContext(ctx, &n, "SELECT n FROM p_counter WHERE id = 1"); err != nil {
				t.Fatalf("read: %v", err)
			}
			return n
		}
		if err := l.Do(ctx, name, bump); err != nil {
			t.Fatalf("do: %v", err)
		}
		if n := read(); n != 1 {
			t.Fatalf("after commit: n = %d, want 1", n)
		}
		boom := errors.New("boom")
		err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			if err := bump(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("do with error: got %v", err)
		}
		if n := read(); n != 1 {
			t.Fatalf("after rollback: n = %d, want 1", n)
		}
		func() {
			defer func() {
				if r := recover(); r != "panic!" {
					t.Fatalf("recovered %v, want the re-raised panic", r)
				}
			}()
			_ = l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
				_ = bump(ctx, tx)
				panic("panic!")
			})
		}()
		if n := read(); n != 1 {
			t.Fatalf("after panic: n = %d, want 1", n)
		}
		// The name is free again.
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("try after panic: %v", err)
		}
		_ = lease.Release(ctx)
	})
}

func TestToken(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		var last dblock.Token
		for i := 0; i < 5; i++ {
			lease, err := l.Acquire(ctx, name, dblock.WithToken())
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			if lease.Token() <= last {
				t.Fatalf("token %d after %d", lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire without token: %v", err)
		}
		if lease.Token() != 0 {
			t.Fatalf("token %d without WithToken", lease.Token())
		}
		_ = lease.Release(ctx)
	})
}

// TestHonoursLeaseHolder: a name held by an unexpired lease is busy for
// pessimistic acquirers, who wait for its expiry. (The lease lasts long
// enough that the try comes before its end on a loaded machine: with
// 300 ms it once came after, and took the name.)
func TestHonoursLeaseHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		r, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "leaser", Mode: dblock.ModeOptimistic, TTL: 2 * time.Second})
		if err != nil || !r.Acquired {
			t.Fatalf("lease: %+v %v", r, err)
		}
		_, err = l.TryAcquire(ctx, name)
		var he *dblock.HeldError
		if !errors.As(err, &he) || he.Owner != "leaser" || !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("try: want HeldError naming the lease owner, got %v", err)
		}
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire after expiry: %v", err)
		}
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil || h.Held() {
			t.Fatalf("holder while pessimistically held: %+v %v", h, err)
		}
		_ = lease.Release(ctx)
	})
}

// TestExcludesLeaseAcquirers: while a pessimistic lock is held, the lease
// statement reports not acquired at once.
func TestExcludesLeaseAcquirers(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		other := iso.Open(t)
		r, err := store.Of(other).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "leaser", Mode: dblock.ModeOptimistic, TTL: time.Minute})
		if err != nil || r.Acquired {
			t.Fatalf("lease while pessimistically held: %+v %v", r, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		r, err = store.Of(other).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "leaser", Mode: dblock.ModeOptimistic, TTL: time.Minute})
		if err != nil || !r.Acquired {
			t.Fatalf("lease after release: %+v %v", r, err)
		}
	})
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx := testCtx(t)
	l := newLocker(t, iso.DB, nil)
	for _, name := range []string{"", string([]byte{0xff}), "a\x00b", string(make([]byte, 256))} {
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("name %q: want ErrInvalidName, got %v", name, err)
		}
	}
	if _, err := pessimistic.New(iso.DB, &pessimistic.Config{TTL: -time.Second}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("negative TTL: want ErrInvalidOption, got %v", err)
	}
	if _, err := l.LockRows(ctx, nil, pessimistic.LockRowsParams{Table: "t", KeyColumn: "id"}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("nil tx: want ErrInvalidOption, got %v", err)
	}
}

// TestCloseLeavesNothing: Close ends the waits under way and rolls back the
// locks still held; afterwards the pool has no connection in use (goroutine
// leaks are checked for the whole package in TestMain).
func TestCloseLeavesNothing(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.Open(t)
		l, err := pessimistic.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		other := newLocker(t, iso.DB, nil)
		name, busy := randName(t), randName(t)
		if iso.Kind == store.SQLite {
			// One write transaction per database: the held lock is the
			// only one, and the waiter waits inside the process.
			busy = name
		} else {
			holder, err := other.Acquire(ctx, busy)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Release(ctx) }()
		}
		lease, err := l.Acquire(ctx, name, dblock.WithToken())
		if err != nil {
			t.Fatal(err)
		}
		waiter := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, busy)
			waiter <- err
		}()
		if err := l.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		// The waiter either was waiting (not acquired, because of Close) or
		// came after Close.
		if err := <-waiter; !errors.Is(err, dblock.ErrClosed) {
			t.Fatalf("waiter: %v, want ErrClosed", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("lease still open after Close")
		}
		if n := db.SQL().Stats().InUse; n != 0 {
			t.Fatalf("%d connections in use after Close", n)
		}
		if _, err := l.TryAcquire(ctx, randName(t)); !errors.Is(err, dblock.ErrClosed) {
			t.Fatalf("TryAcquire after Close: %v, want ErrClosed", err)
		}
		if iso.Kind != store.SQLite {
			next, err := other.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("name still held after Close: %v", err)
			}
			_ = next.Release(ctx)
		}
	})
}

// TestSQLiteDeferredPool: on a pool whose BEGIN is deferred (not opened by
// dialect.Open), a lock still takes the database's write lock, so it stays
// exclusive.
func TestSQLiteDeferredPool(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx := testCtx(t)
	path := strings.TrimPrefix(iso.DSN, "sqlite://")
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	db, err := dialect.New(ctx, raw, dialect.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, db, nil)
	other := newLocker(t, iso.DB, nil)
	name := randName(t)
	for i := 0; i < 2; i++ { // The first round creates the row, the second finds it.
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if _, err := other.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("round %d: try from another pool: %v, want ErrNotAcquired", i, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
}
