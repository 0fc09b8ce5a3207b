package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestStatementDeadline runs lease statements under deadline-only contexts
// (store.StatementContext), which this package's connections bound by the
// socket's deadline rather than the driver's watch of the context: a
// release that waits on a row another transaction locked fails with
// context.DeadlineExceeded when its deadline passes (before the server's
// own lock-wait bound of 1 s), its context has ended by then, and the pool
// goes on; a query past its deadline fails alike; and a deadline does not
// outlive its statement: a transaction that ran an Exec and a query under
// one commits after that deadline passed.
func TestStatementDeadline(t *testing.T) {
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("cleared", func(t *testing.T) {
		tx, err := iso.DB.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		short, stop := db.StatementContext(context.Background(), 200*time.Millisecond)
		defer stop()
		if _, _, ok := store.DeadlineOnly(short); !ok {
			t.Fatal("the statement context is not deadline-only")
		}
		if _, err := tx.ExecContext(short, "DO 1"); err != nil {
			t.Fatalf("statement under its deadline: %v", err)
		}
		var one int
		if err := tx.QueryRowContext(short, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("query under its deadline: %d, %v", one, err)
		}
		<-short.Done()
		time.Sleep(50 * time.Millisecond)
		if _, err := tx.ExecContext(ctx, "DO 2"); err != nil {
			t.Fatalf("statement after an earlier one's deadline: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit after an earlier statement's deadline: %v", err)
		}
	})

	t.Run("query", func(t *testing.T) {
		stuck, stop := db.StatementContext(context.Background(), 300*time.Millisecond)
		defer stop()
		var slept int
		err := db.QueryRowContext(stuck, "SELECT SLEEP(2)").Scan(&slept)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("query past its deadline: %v (%d), want context.DeadlineExceeded", err, slept)
		}
		if !errors.Is(stuck.Err(), context.DeadlineExceeded) {
			t.Fatalf("the query's context when it returned: %v, want context.DeadlineExceeded", stuck.Err())
		}
	})

	dbtest.ReleasePastDeadline(t, iso, "SELECT 1 FROM dblock_locks WHERE name = ? FOR UPDATE")
}

// TestStatementCancelled: a statement under a context its caller cancels
// is carried by the socket, not the driver's watch, and ends as under the
// watch: a SLEEP(5) cancelled 200 ms in fails with context.Canceled, and
// the checks of dbtest.ReleaseCancelled hold.
func TestStatementCancelled(t *testing.T) {
	iso := dbtest.New(t, store.MySQL)
	if err := sleepCancelled(iso.DB.SQL()); !errors.Is(err, context.Canceled) {
		t.Fatalf("SLEEP(5) cancelled in flight: %v, want context.Canceled", err)
	}
	selectOne := func(ctx context.Context, conn *sql.Conn) error {
		var one int
		return conn.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
	dbtest.ReleaseCancelled(t, iso, "SELECT 1 FROM dblock_locks WHERE name = ? FOR UPDATE", selectOne)
}
