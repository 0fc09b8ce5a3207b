package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestUserStatementDeadlock: two holders deadlock on statements of their
// own (not dblock's). On MySQL/MariaDB the server rolls the victim's whole
// transaction back while its *sql.Tx believes it open; the victim's Commit
// must then report the lock lost (ErrTxEnded) rather than pretend to commit.
// On PostgreSQL the victim's transaction is aborted and its Commit reports
// ErrRolledBack.
func TestUserStatementDeadlock(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		if victims, sum := userDeadlock(t, iso, iso.DB, iso.Open(t)); victims != 1 || sum != 2 {
			t.Fatalf("%d deadlock victims, sum %d after the survivor's commit; want 1 victim and a sum of 2", victims, sum)
		}
	})
}

// userDeadlock runs the deadlock of TestUserStatementDeadlock with the
// holders on db1 and db2, and returns how many of the two were its victims
// and the table's sum once the survivor committed (want 1 and 2).
func userDeadlock(t *testing.T, iso *dbtest.Isolated, db1, db2 *dialect.DB) (victims, sum int) {
	ctx := testCtx(t)
	mustExec(t, iso, "CREATE TABLE p_acct (id INT PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, iso, "INSERT INTO p_acct (id, n) VALUES (1, 0), (2, 0)")
	mustExec(t, iso, "CREATE TABLE p_marks (id INT PRIMARY KEY)")
	l1 := newLocker(t, db1, nil)
	l2 := newLocker(t, db2, nil)
	na, nb := randName(t), randName(t)
	for _, n := range []string{na, nb} {
		// Created with the server's own dialect (see mysql8Flavour).
		if err := iso.Store().EnsureRow(ctx, nil, n); err != nil {
			t.Fatal(err)
		}
	}
	la, err := l1.Acquire(ctx, na)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := l2.Acquire(ctx, nb)
	if err != nil {
		t.Fatal(err)
	}
	update := func(tx *sql.Tx, id int) error {
		_, err := tx.ExecContext(ctx, store.Of(db1).Rebind("UPDATE p_acct SET n = n + 1 WHERE id = ?"), id)
		return store.Of(db1).Classify(err)
	}
	if err := update(la.Tx(), 1); err != nil {
		t.Fatal(err)
	}
	if err := update(lb.Tx(), 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []struct {
		lease *pessimistic.Lease
		id    int
	}{{la, 2}, {lb, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = update(c.lease.Tx(), c.id)
			if errs[i] == nil {
				return
			}
			// The victim carries on as if nothing happened: a write, then
			// Commit. On MySQL the write runs in autocommit mode (the
			// server ended the transaction), which Commit must reveal.
			_, _ = c.lease.Tx().ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (9)")
			err := c.lease.Commit(ctx)
			if iso.Kind == store.MySQL {
				if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, pessimistic.ErrTxEnded) {
					t.Errorf("victim's commit: %v, want ErrLost with ErrTxEnded", err)
				}
			} else if !errors.Is(err, pessimistic.ErrRolledBack) {
				t.Errorf("victim's commit: %v, want ErrRolledBack", err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, dblock.ErrDeadlock) {
			victims++
		} else if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
	}
	for i, lease := range []*pessimistic.Lease{la, lb} {
		if errs[i] == nil {
			if err := lease.Commit(ctx); err != nil {
				t.Fatalf("survivor's commit: %v", err)
			}
		}
	}
	if err := iso.Store().GetContext(ctx, &sum, "SELECT SUM(n) FROM p_acct"); err != nil {
		t.Fatal(err)
	}
	return victims, sum
}

// TestLockRowsDeadlockEndsTx: on MySQL, a deadlock reported by LockRows
// ends the caller's own transaction in database/sql too, so that its later
// statements fail instead of running in autocommit mode.
func TestLockRowsDeadlockEndsTx(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := testCtx(t)
	l := newLocker(t, iso.DB, nil)
	mustExec(t, iso, "CREATE TABLE p_acct (id INT PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, iso, "INSERT INTO p_acct (id, n) VALUES (1, 0), (2, 0)")
	mustExec(t, iso, "CREATE TABLE p_marks (id INT PRIMARY KEY)")
	tx1, err := iso.Store().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback() }()
	tx2, err := iso.Store().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback() }()
	lock := func(tx *sql.Tx, key int) error {
		_, err := l.LockRows(ctx, tx, pessimistic.LockRowsParams{Table: "p_acct", KeyColumn: "id", Keys: []any{key}})
		return err
	}
	if err := lock(tx1, 1); err != nil {
		t.Fatal(err)
	}
	if err := lock(tx2, 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []struct {
		tx  *sql.Tx
		key int
	}{{tx1, 2}, {tx2, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = lock(c.tx, c.key)
			if errs[i] != nil {
				if _, err := c.tx.ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (9)"); !errors.Is(err, sql.ErrTxDone) {
					t.Errorf("statement after the deadlock: %v, want sql.ErrTxDone", err)
				}
			} else if err := c.tx.Commit(); err != nil {
				t.Errorf("survivor's commit: %v", err)
			}
		}()
	}
	wg.Wait()
	if !errors.Is(errs[0], dblock.ErrDeadlock) && !errors.Is(errs[1], dblock.ErrDeadlock) {
		t.Fatalf("no deadlock: %v", errs)
	}
	if got := marks(t, iso); got != "" {
		t.Fatalf("the victim's later statement ran: rows %q", got)
	}
}

// TestUserStatementDeadlockCallerPool: the same on pools the caller handed
// to dialect.New. On MariaDB, a pool dblock opened commits a hold with the
// check in the same statement (store.ChecksCommit), and a caller's pool has
// EndHold check first: both must reveal the victim's ended transaction.
func TestUserStatementDeadlockCallerPool(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	callerPool := func() *dialect.DB {
		db, err := dialect.New(testCtx(t), iso.Open(t).SQL(), dialect.MySQL)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db1, db2 := callerPool(), callerPool()
	if store.Of(db1).ChecksCommit() {
		t.Fatal("a caller's pool checks its commits in the statement; want EndHold's check")
	}
	if want := iso.Store().MariaDB(); iso.Store().ChecksCommit() != want {
		t.Fatalf("ChecksCommit on a pool Open opened: %v, want %v (MariaDB)", !want, want)
	}
	if victims, sum := userDeadlock(t, iso, db1, db2); victims != 1 || sum != 2 {
		t.Fatalf("caller's pools: %d deadlock victims, sum %d; want 1 victim and a sum of 2", victims, sum)
	}
}

// TestUserStatementDeadlockCheckedBlock: the same on MariaDB where the
// schema lacks the checked commit's procedure (it predates MySQL migration
// 00018): a hold's commit sends the anonymous block instead, and it still
// reveals the victim's ended transaction.
func TestUserStatementDeadlockCheckedBlock(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	if !iso.Store().ChecksCommit() {
		t.Skip("only MariaDB checks a commit in the statement")
	}
	mustExec(t, iso, "DROP PROCEDURE dblock_commit_checked")
	if victims, sum := userDeadlock(t, iso, iso.DB, iso.Open(t)); victims != 1 || sum != 2 {
		t.Fatalf("checked block: %d deadlock victims, sum %d; want 1 victim and a sum of 2", victims, sum)
	}
}

// TestImplicitCommitInDo: on MariaDB a hold's fn sends a statement the
// server commits the transaction before (DDL): the lock went with that
// commit, so Do must not report success, on a pool dblock opened (whose
// commit is plain only while every statement of the hold was a plain data
// statement that did not fail) and on a caller's pool (EndHold's check).
// A Do whose fn only reads and writes rows commits them.
func TestImplicitCommitInDo(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := testCtx(t)
	mustExec(t, iso, "CREATE TABLE p_rows (id INT PRIMARY KEY)")
	callerPool, err := dialect.New(ctx, iso.Open(t).SQL(), dialect.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	for i, db := range []*dialect.DB{iso.DB, callerPool} {
		l := newLocker(t, db, nil)
		name := randName(t)
		err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, fmt.Sprintf("CREATE TABLE p_ddl_%d (id INT)", i))
			return err
		})
		if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, pessimistic.ErrTxEnded) {
			t.Errorf("pool %d: Do whose fn committed implicitly: %v, want ErrLost with ErrTxEnded", i, err)
		}
		err = l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM p_rows").Scan(&n); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO p_rows (id) VALUES (?)", n+1)
			return err
		})
		if err != nil {
			t.Fatalf("pool %d: Do of plain statements: %v", i, err)
		}
	}
	var n int
	if err := iso.Store().GetContext(ctx, &n, "SELECT COUNT(*) FROM p_rows"); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("rows committed by the two Dos of plain statements: %d, want 2", n)
	}
}
