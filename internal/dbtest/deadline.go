package dbtest

import (
	"context"
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
	res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "o1", TTL: time.Minute, Mode: dblock.ModeOptimistic})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	tx, err := iso.DB.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, lockRow, name); err != nil {
		t.Fatal(err)
	}
	stuck, stop := db.StatementContext(context.Background(), 300*time.Millisecond)
	_, err = db.ReleaseLease(stuck, nil, name, "o1", res.Token)
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
