package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// ReleasePastDeadline checks a statement bounded by a deadline-only
// context (store.StatementContext) on iso's database: while a transaction
// holds a lease's row locked (lockRow: the dialect's SELECT ... FOR UPDATE
// of one name), the lease's release, bounded by 300 ms, fails with
// context.DeadlineExceeded and its context has ended by then; once the
// transaction ends the pool still answers. The release's outcome on the
// server is unknown (it may run once the row is free), as after any
// statement given up on.
func ReleasePastDeadline(t *testing.T, iso *Isolated, lockRow string) {
	t.Helper()
	db := iso.Store()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "deadline"
	res, tx := heldAndLocked(t, ctx, iso, name, lockRow)
	stuck, stop := db.StatementContext(context.Background(), 300*time.Millisecond)
	_, err := db.ReleaseLease(stuck, nil, name, "o1", res.Token)
	ctxErr := stuck.Err()
	stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("release past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if !errors.Is(ctxErr, context.DeadlineExceeded) {
		t.Fatalf("the statement's context when it returned: %v, want context.DeadlineExceeded", ctxErr)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LeaseHolder(ctx, nil, name); err != nil {
		t.Fatalf("the pool after a statement timed out: %v", err)
	}
}

// ReleaseCancelled checks a statement under a context its caller cancels
// (as Lease.Release(ctx) passes it on), which the drivers' own paths carry
// on the connection's socket instead of watching: while a transaction holds
// a lease's row locked (lockRow, as for ReleasePastDeadline), the release
// under a context cancelled 200 ms in fails with context.Canceled (else it
// would wait for the row until the transaction ends, which waits for it),
// and the pool answers once the transaction ends. As after any statement
// given up on, the release's outcome on the server is unknown: it may run
// once the row is free (the server learns of the closed connection when
// it answers), so the lease is either still held or free.
// Then, on one connection, statements (stmt, the dialect's path that
// carries a context on the socket) whose contexts are cancelled just as
// they return, or just after, leave the connection as good as before: the
// next statement on it, under no deadline, runs.
func ReleaseCancelled(t *testing.T, iso *Isolated, lockRow string, stmt func(context.Context, *sql.Conn) error) {
	t.Helper()
	db := iso.Store()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "cancelled"
	res, tx := heldAndLocked(t, ctx, iso, name, lockRow)
	stuck, cancelStuck := context.WithCancel(ctx)
	timer := time.AfterFunc(200*time.Millisecond, cancelStuck)
	defer timer.Stop()
	_, err := db.ReleaseLease(stuck, nil, name, "o1", res.Token)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("release cancelled while it waited: %v, want context.Canceled", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	h, err := db.LeaseHolder(ctx, nil, name)
	if err != nil || h.Owner != "o1" && h.Owner != "" {
		t.Fatalf("after a cancelled release: holder %+v, %v; want o1 still holding, or nobody", h, err)
	}
	if h.Owner == "o1" {
		releaseAfterCancelled(t, ctx, db, name, res.Token)
	}
	cancelledAround(t, iso, stmt)
}

// releaseAfterCancelled releases name (o1, token) after a cancelled
// release of it that may still run on the server: the server learns that
// its connection closed only when it answers, so the cancelled statement
// may take the row once the locking transaction ended and release the
// lease between the caller's look at the holder and this release. Then
// this one finds nothing to release, and the lease is free.
func releaseAfterCancelled(t *testing.T, ctx context.Context, db *store.DB, name string, token dblock.Token) {
	t.Helper()
	ok, err := db.ReleaseLease(ctx, nil, name, "o1", token)
	if err != nil {
		t.Fatalf("the release after a cancelled one: %v", err)
	}
	if ok {
		return
	}
	h, err := db.LeaseHolder(ctx, nil, name)
	if err != nil || h.Owner != "" {
		t.Fatalf("the release after a cancelled one released nothing, yet the holder is %+v (%v)", h, err)
	}
}

// cancelledAround runs statements on one connection under contexts
// cancelled as they return, or a little later, each followed by one under
// a context that is never cancelled; that one must run.
func cancelledAround(t *testing.T, iso *Isolated, stmt func(context.Context, *sql.Conn) error) {
	t.Helper()
	ctx := context.Background()
	conn, err := iso.DB.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for i := range 200 {
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(i%20)*20*time.Microsecond, cancel)
		err := stmt(sctx, conn)
		timer.Stop()
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("statement %d under a cancelled context: %v, want nil or context.Canceled", i, err)
		}
		if err != nil {
			// Cancelled in flight: the connection was closed; take another.
			_ = conn.Close()
			if conn, err = iso.DB.SQL().Conn(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := stmt(ctx, conn); err != nil {
			t.Fatalf("statement %d's connection after its context was cancelled: %v", i, err)
		}
	}
}

// heldAndLocked acquires name for owner o1 and opens a transaction that
// holds its row locked (lockRow), rolled back when the test ends unless
// the caller ends it first.
func heldAndLocked(t *testing.T, ctx context.Context, iso *Isolated, name, lockRow string) (store.AcquireResult, *sql.Tx) {
	t.Helper()
	res, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "o1", TTL: time.Minute, Mode: dblock.ModeOptimistic})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	tx, err := iso.DB.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(ctx, lockRow, name); err != nil {
		t.Fatal(err)
	}
	return res, tx
}
