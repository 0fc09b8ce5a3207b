package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestMariaDBHoldStatements: a MariaDB hold on a pool dblock opened sends
// two statements, its lock's call (dblock_lock_begin, which begins the
// transaction) and its checked commit, where a hand-written one sends
// three; where the schema lacks the procedure (it predates MySQL migration
// 00026; an account that may not execute it is alike), or while another
// hold of the Locker is live (the call costs the server more than the
// round trip it saves once holds overlap: Locker.defersBegin), it sends
// START TRANSACTION and the plain lock statement, and holds as before.
// Either way the hold is a transaction: fn's write is rolled back with
// fn's error and committed with nil, and no other session can lock the row
// while fn runs.
func TestMariaDBHoldStatements(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		drop    bool
		busy    bool // Another hold of the Locker is live meanwhile.
		perHold int64
	}{
		{"the lock's call and the checked commit", false, false, 2},
		{"START TRANSACTION, the lock, the checked commit", true, false, 3},
		{"beside another hold: START TRANSACTION, the lock, the checked commit", false, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, store.MySQL)
			if !iso.Store().ChecksCommit() {
				t.Skip("only MariaDB begins a hold with its lock")
			}
			if c.drop {
				mustExec(t, iso, "DROP PROCEDURE dblock_lock_begin")
			}
			l := newLocker(t, iso.DB, nil)
			if c.busy {
				other, err := l.Acquire(testCtx(t), randName(t))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = other.Release(context.Background()) }()
			}
			perHold, err := statementsPerHold(t, l)
			if err != nil {
				t.Fatal(err)
			}
			if perHold != c.perHold {
				t.Fatalf("a hold sent %d statements, want %d", perHold, c.perHold)
			}
			rolledBack, committed, othersLock := holdTransaction(t, iso, l)
			if rolledBack != 0 || committed != 1 {
				t.Fatalf("fn's writes after an error / nil: %d / %d rows, want 0 / 1", rolledBack, committed)
			}
			if !errors.Is(othersLock, dblock.ErrNotAcquired) {
				t.Fatalf("another session's lock of the row while fn ran: %v, want ErrNotAcquired", othersLock)
			}
		})
	}
}

// statementsPerHold counts the statements the server received from the
// client (status Questions, which counts none run inside a procedure)
// between the reads of two consecutive holds on one connection, less the
// second hold's reads. The Locker's one-time statements (its first hold
// checks for the history's trigger) are past: the first read is a hold's
// too.
func statementsPerHold(t *testing.T, l *pessimistic.Locker) (int64, error) {
	ctx := testCtx(t)
	name := randName(t)
	read := func() (id, questions int64, err error) {
		err = l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			var v string
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&v, &questions)
		})
		return id, questions, err
	}
	if _, _, err := read(); err != nil {
		return 0, err
	}
	for range 20 {
		id1, q1, err := read()
		if err != nil {
			return 0, err
		}
		id2, q2, err := read()
		if err != nil {
			return 0, err
		}
		if id1 == id2 {
			return q2 - q1 - 2, nil // Less the second hold's two reads.
		}
	}
	return 0, errors.New("no two consecutive holds on one connection")
}

// holdTransaction runs a hold whose fn writes a row and fails, and one
// whose fn writes a row and succeeds: it returns the rows each left, and
// the outcome of another session's lock of the name while the second fn
// ran (nil: it locked the row), classified.
func holdTransaction(t *testing.T, iso *dbtest.Isolated, l *pessimistic.Locker) (rolledBack, committed int, othersLock error) {
	ctx := testCtx(t)
	name := randName(t)
	mustExec(t, iso, "CREATE TABLE p_marks (id INT PRIMARY KEY)")
	failed := errors.New("fn failed")
	err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (1)"); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Do whose fn failed = %v", err)
	}
	other := iso.Open(t).SQL()
	err = l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO p_marks (id) VALUES (2)"); err != nil {
			return err
		}
		othersLock = iso.Store().Classify(lockElsewhere(ctx, other, name))
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	count := func(id int) int {
		var n int
		if err := iso.Store().GetContext(ctx, &n, fmt.Sprintf("SELECT COUNT(*) FROM p_marks WHERE id = %d", id)); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return count(1), count(2), othersLock
}

// lockElsewhere locks name's row without waiting in a transaction of its
// own on db, and rolls it back.
func lockElsewhere(ctx context.Context, db *sql.DB, name string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var got string
	return tx.QueryRowContext(ctx, "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE NOWAIT", name).Scan(&got)
}

// BenchmarkDoLockBegin compares MariaDB holds on a schema with the lock's
// call (which a hold begins with while it is its Locker's only one:
// Locker.defersBegin) against holds on a schema without the procedure
// (START TRANSACTION first), at 1, 8 and 32 goroutines (a name each), in
// cells that alternate between the two; the metric "call/plain" is the
// ratio of their rates. Before holds that overlap began with START
// TRANSACTION, it read 0.88-0.95 at 8 and 32 goroutines in five runs of
// five (1.10-1.16 at 1 in three).
func BenchmarkDoLockBegin(b *testing.B) {
	withCall := dbtest.New(b, store.MySQL)
	if !withCall.Store().ChecksCommit() {
		b.Skip("only MariaDB begins a hold with its lock")
	}
	plain := dbtest.New(b, store.MySQL)
	if _, err := plain.Store().ExecContext(context.Background(), "DROP PROCEDURE dblock_lock_begin"); err != nil {
		b.Fatal(err)
	}
	for _, g := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			lockers := [2]*pessimistic.Locker{}
			for i, iso := range []*dbtest.Isolated{withCall, plain} {
				iso.DB.SQL().SetMaxOpenConns(g + 4)
				l, err := pessimistic.New(iso.DB, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = l.Close() })
				lockers[i] = l
			}
			var holds [2]int64
			for b.Loop() {
				for i, l := range lockers {
					holds[i] += holdFor(b, l, g, 200*time.Millisecond)
				}
			}
			b.ReportMetric(float64(holds[0])/float64(holds[1]), "call/plain")
		})
	}
}

// holdFor runs g goroutines of Do on a name each for d, and returns how
// many holds they made.
func holdFor(b *testing.B, l *pessimistic.Locker, g int, d time.Duration) int64 {
	ctx := context.Background()
	fn := func(context.Context, *sql.Tx) error { return nil }
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := range g {
		wg.Go(func() {
			name := fmt.Sprintf("bench:begin:%d", i)
			n := int64(0)
			for time.Now().Before(deadline) {
				if err := l.Do(ctx, name, fn); err != nil {
					b.Error(err)
					return
				}
				n++
			}
			total.Add(n)
		})
	}
	wg.Wait()
	return total.Load()
}
