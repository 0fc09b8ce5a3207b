package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestPoolExhaustedByHolders: holders that take every connection of a small
// pool do not starve the session watcher (their locks are never declared
// lost for want of a connection), tokens are still issued, TryAcquire fails
// at once with ErrPoolExhausted, and a killed session is still noticed.
func TestPoolExhaustedByHolders(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.Open(t)
		db.SQL().SetMaxOpenConns(3) // The Locker's own connection and two holders.
		// The server ends a holder idle past the TTL; the watcher declares a
		// session it cannot confirm lost after TTL/2: the test waits in
		// between.
		const ttl = 6 * time.Second
		l := newLocker(t, db, &pessimistic.Config{TTL: ttl, WatchInterval: 20 * time.Millisecond})
		a, err := l.Acquire(ctx, randName(t), dblock.WithToken())
		if err != nil {
			t.Fatalf("acquire a: %v", err)
		}
		b, err := l.Acquire(ctx, randName(t), dblock.WithToken())
		if err != nil {
			t.Fatalf("acquire b: %v", err)
		}
		if n := db.SQL().Stats().InUse; n != 3 {
			t.Fatalf("%d connections in use, want 3 (the pool is full)", n)
		}
		start := time.Now()
		_, err = l.TryAcquire(ctx, randName(t))
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, pessimistic.ErrPoolExhausted) {
			t.Fatalf("try on a full pool: %v, want ErrNotAcquired with ErrPoolExhausted", err)
		}
		if d := time.Since(start); d >= pessimistic.TryConnWait {
			t.Fatalf("try on a full pool took %v, want it not to wait for a connection", d)
		}
		if _, err := l.Acquire(ctx, randName(t), dblock.WithWait(50*time.Millisecond)); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("bounded acquire on a full pool: %v, want ErrNotAcquired", err)
		}
		// A token asked on re-entry is committed on the Locker's own
		// connection, not on the (full) pool.
		c, err := l.Acquire(ctx, b.Name(), dblock.WithOwner(b.Owner()), dblock.WithToken())
		if err != nil {
			t.Fatalf("re-enter b: %v", err)
		}
		if c.Token() != 0 && c.Token() != b.Token() {
			t.Fatalf("re-entry token %d, want b's %d", c.Token(), b.Token())
		}
		_ = c.Release(ctx)
		// Past TTL/2 (when an unconfirmed session is declared lost), the
		// watcher has confirmed both sessions on its own connection.
		timer := time.NewTimer(ttl/2 + time.Second)
		select {
		case <-a.Done():
			t.Fatalf("a lost while the pool was full: %v", a.Err())
		case <-b.Done():
			t.Fatalf("b lost while the pool was full: %v", b.Err())
		case <-timer.C:
		}
		iso.KillSession(t, ctx, sessionID(t, ctx, iso, a))
		waitDone(t, a)
		if err := a.Err(); !errors.Is(err, dblock.ErrConnLost) {
			t.Fatalf("a after its session was killed: %v, want ErrConnLost", err)
		}
		_ = a.Release(ctx)
		if err := b.Release(ctx); err != nil {
			t.Fatalf("release b: %v", err)
		}
	})
}

// TestTokensSmallPool: acquisitions that ask for tokens never deadlock the
// pool, even when each pins a connection while the token is issued: the
// token is committed on the Locker's own connection, taken first.
func TestTokensSmallPool(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.Open(t)
		db.SQL().SetMaxOpenConns(2)
		l := newLocker(t, db, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 4; i++ {
			name := randName(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					lease, err := l.Acquire(ctx, name, dblock.WithToken())
					if err != nil {
						errs <- err
						return
					}
					if lease.Token() <= 0 {
						errs <- errors.New("no token")
					}
					if err := lease.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("acquire with token on a 2-connection pool: %v", err)
		}
	})
}

// TestSingleConnectionPool: with SetMaxOpenConns(1) locks still work (the
// Locker keeps no connection of its own), and WithToken, which needs a
// second connection to commit the token on, is refused clearly.
func TestSingleConnectionPool(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		db := iso.Open(t)
		db.SQL().SetMaxOpenConns(1)
		l := newLocker(t, db, nil)
		name := randName(t)
		if err := l.Do(ctx, name, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatalf("do on a one-connection pool: %v", err)
		}
		if _, err := l.Acquire(ctx, name, dblock.WithToken()); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Fatalf("token on a one-connection pool: %v, want ErrInvalidOption", err)
		}
		if n := db.SQL().Stats().InUse; n != 0 {
			t.Fatalf("%d connections in use", n)
		}
	})
}

// TestSQLiteTryTokenBusy: TryAcquire WithToken on a name held in another
// pool returns ErrNotAcquired at once: the token is issued on the attempt's
// own connection, whose busy timeout is zero, not on the pool (5 s).
func TestSQLiteTryTokenBusy(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx := testCtx(t)
	holder := newLocker(t, iso.DB, nil)
	l := newLocker(t, iso.Open(t), nil)
	name := randName(t)
	lease, err := holder.Acquire(ctx, name, dblock.WithToken())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	start := time.Now()
	_, err = l.TryAcquire(ctx, name, dblock.WithToken())
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("try with token: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("try with token took %v, want at once (well under the 5 s busy timeout)", d)
	}
}
