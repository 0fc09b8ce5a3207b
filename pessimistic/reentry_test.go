package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestReentrantInnerRollback: a re-entrant handle whose Do fails rolls back
// its own work only (to the savepoint taken when it re-entered); the outer
// handle's work commits.
func TestReentrantInnerRollback(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		mustExec(t, iso, "CREATE TABLE p_marks (id INT PRIMARY KEY)")
		outer, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		insert := func(tx *sql.Tx, id int) {
			t.Helper()
			if _, err := tx.ExecContext(ctx, iso.Store().Rebind("INSERT INTO p_marks (id) VALUES (?)"), id); err != nil {
				t.Fatalf("insert %d: %v", id, err)
			}
		}
		insert(outer.Tx(), 1)
		boom := errors.New("boom")
		err = l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			insert(tx, 2)
			return boom
		}, dblock.WithOwner("me"))
		if !errors.Is(err, boom) || errors.Is(err, pessimistic.ErrRolledBack) {
			t.Fatalf("inner Do: %v, want only boom", err)
		}
		// The transaction goes on: the outer handle writes and commits.
		insert(outer.Tx(), 3)
		if err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			insert(tx, 4)
			return nil
		}, dblock.WithOwner("me")); err != nil {
			t.Fatalf("inner Do that commits: %v", err)
		}
		if err := outer.Commit(ctx); err != nil {
			t.Fatalf("outer commit: %v", err)
		}
		if got := marks(t, iso); got != "1,3,4" {
			t.Fatalf("rows %s, want 1,3,4", got)
		}
	})
}

// TestReentrantOuterRollback: when the first handle asks for a rollback while
// a re-entrant handle still holds, that handle's Commit (which ends the
// transaction) reports ErrRolledBack instead of a silent rollback.
func TestReentrantOuterRollback(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		mustExec(t, iso, "CREATE TABLE p_marks (id INT PRIMARY KEY)")
		outer, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		inner, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatalf("re-enter: %v", err)
		}
		if _, err := inner.Tx().ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (1)"); err != nil {
			t.Fatalf("insert: %v", err)
		}
		if err := outer.Rollback(ctx); err != nil {
			t.Fatalf("outer rollback: %v", err)
		}
		if err := inner.Commit(ctx); !errors.Is(err, pessimistic.ErrRolledBack) {
			t.Fatalf("inner commit after the outer rollback: %v, want ErrRolledBack", err)
		}
		if got := marks(t, iso); got != "" {
			t.Fatalf("rows %q after the rollback, want none", got)
		}
		// Non-nested order: an inner handle rolled back after a later one
		// re-entered undoes the later one's work too, and says so.
		a, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.Acquire(ctx, name, dblock.WithOwner("me"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Tx().ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (2)"); err != nil {
			t.Fatalf("insert: %v", err)
		}
		if err := b.Rollback(ctx); err != nil {
			t.Fatalf("b rollback: %v", err)
		}
		if err := c.Commit(ctx); !errors.Is(err, pessimistic.ErrRolledBack) {
			t.Fatalf("c commit after b rolled back past it: %v, want ErrRolledBack", err)
		}
		if err := a.Commit(ctx); err != nil {
			t.Fatalf("a commit: %v", err)
		}
		if got := marks(t, iso); got != "" {
			t.Fatalf("rows %q, want none", got)
		}
	})
}

func mustExec(t *testing.T, iso *dbtest.Isolated, query string) {
	t.Helper()
	if _, err := iso.Store().ExecContext(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// marks lists p_marks' ids, comma-separated.
func marks(t *testing.T, iso *dbtest.Isolated) string {
	t.Helper()
	var ids []int
	if err := iso.Store().SelectContext(context.Background(), &ids, "SELECT id FROM p_marks ORDER BY id"); err != nil {
		t.Fatalf("read marks: %v", err)
	}
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += string(rune('0' + id))
	}
	return s
}
