package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestCutOffGivesConnBack (PostgreSQL, MariaDB): a transaction of the store
// whose context ends while its statement runs has its connection back in the
// pool when the call returns. database/sql rolls such a transaction back from
// a goroutine of its own, after which Rollback returns at once; a Locker
// closed right after a renewal cut off by the lease's deadline returned with
// a connection of the user's pool still in use (seen in the conformance
// suite's DoCancelsOnLoss on MariaDB).
func TestCutOffGivesConnBack(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			cutOffWriteTx(t, iso)
			if kind == store.MySQL {
				cutOffRenewal(t, iso)
			}
		})
	}
}

// rounds is how many cut-off statements each check sends: before the fix,
// about one in three left its connection in use for a while after returning.
const rounds = 20

// cutOffWriteTx cuts off a sleep in BeginWriteTx's transaction.
func cutOffWriteTx(t *testing.T, iso *dbtest.Isolated) {
	db := iso.Store()
	sleep := "SELECT pg_sleep(5)"
	if iso.Kind == store.MySQL {
		sleep = "SELECT SLEEP(5)"
	}
	var late lateRounds
	for i := range rounds {
		// The context ends 30 ms after the BEGIN (a cut-off connection is
		// discarded, and the next round's may need that long to dial).
		ctx, cancel := context.WithCancel(context.Background())
		tx, end, err := db.BeginWriteTx(ctx)
		if err != nil {
			cancel()
			t.Fatalf("round %d: begin: %v", i, err)
		}
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err = tx.ExecContext(ctx, sleep)
		end()
		cancel()
		if err == nil {
			t.Fatalf("round %d: a 5 s sleep ran to its end within 30 ms", i)
		}
		late.check(t, db, i, "the cut-off transaction ended")
	}
}

// cutOffRenewal cuts off a renewal waiting for the row's lock, held by
// another pool's transaction.
func cutOffRenewal(t *testing.T, iso *dbtest.Isolated) {
	db, ctx := iso.Store(), context.Background()
	res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: "cutoff", Owner: "a", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	blocker, err := store.Of(iso.Open(t)).BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin blocker: %v", err)
	}
	defer func() { _ = blocker.Rollback() }()
	var name string
	if err := blocker.QueryRowxContext(ctx, "SELECT name FROM dblock_locks WHERE name = 'cutoff' FOR UPDATE").Scan(&name); err != nil {
		t.Fatalf("lock the row: %v", err)
	}
	var late lateRounds
	for i := range rounds {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		_, err := db.RenewLease(rctx, nil, "cutoff", "a", res.Token, time.Minute)
		cancel()
		if err == nil {
			t.Fatalf("round %d: a renewal of a row locked elsewhere returned without error", i)
		}
		late.check(t, db, i, "the cut-off renewal returned")
	}
}

// lateRounds counts the rounds whose connection was not back in the pool
// the moment the call returned. Before the fix about one round in three
// was (a rollback round trip later); after it, CI saw one round in a run,
// once, back within microseconds, a window not yet explained. A round is
// let off when its connection is back within lateGrace and at most
// lateMax rounds are: the bug the test guards against still fails it.
type lateRounds int

const (
	lateGrace = 50 * time.Millisecond
	lateMax   = 2
)

func (late *lateRounds) check(t *testing.T, db *store.DB, round int, after string) {
	t.Helper()
	if db.Stats().InUse == 0 {
		return
	}
	*late++
	deadline := time.Now().Add(lateGrace)
	for db.Stats().InUse != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	n := db.Stats().InUse
	if n != 0 || int(*late) > lateMax {
		t.Fatalf("round %d: %d connections in use %s after %s, %d rounds late so far (at most %d may be)", round, n, lateGrace, after, *late, lateMax)
	}
	t.Logf("round %d: the connection was back in the pool within %s, not at once, after %s", round, lateGrace, after)
}
