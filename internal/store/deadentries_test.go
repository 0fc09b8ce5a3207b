package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// churnOwners is how many owners come and go on one name before the check:
// each leaves a dead row behind whose index entry has a key of its own.
const churnOwners = 300

// TestDeadEntriesKilled: on PostgreSQL, the readers' release, the
// semaphore's grant, a fair release's hand-off and a fair waiter's check
// (fairqueue's, and the gate's of the shared locks' fair option) count what is left of a name
// with index scans that mark the entries of rows deleted by earlier owners
// dead (a bitmap scan never does), so between two vacuums the count does
// not revisit every reader, grant or waiter the name ever had. The check counts the entries of the name a
// bitmap scan still returns: once the deleted rows are dead to every
// transaction of the database, the next release or grant must have marked
// them. (MariaDB's purge removes deleted rows itself, and SQLite deletes in
// place: the property is PostgreSQL's.)
func TestDeadEntriesKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, store.Postgres).Store()

	t.Run("shares", func(t *testing.T) {
		name := "dead-shares"
		pair := func(owner string) {
			res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: owner, TTL: time.Minute})
			if err != nil || !res.Acquired {
				t.Fatalf("read by %s: %+v, %v", owner, res, err)
			}
			var n int
			if err := db.GetContext(ctx, &n, `SELECT count(*) FROM dblock_shares WHERE name = $1 AND owner = $2`, name, owner); err != nil || n != 1 {
				t.Fatalf("share of %s: %d, %v; want 1 (the test needs a row deleted per owner)", owner, n, err)
			}
			if ok, err := db.ReleaseShare(ctx, name, owner, res.Token); err != nil || !ok {
				t.Fatalf("release by %s: %v, %v", owner, ok, err)
			}
		}
		// A reader that stays: each churning reader joins its period and
		// has a share (a reader alone would be recorded in the name's row).
		if res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: "resident", TTL: time.Hour}); err != nil || !res.Acquired {
			t.Fatalf("read by resident: %+v, %v", res, err)
		}
		for i := range churnOwners {
			pair(fmt.Sprintf("churn-%d", i))
		}
		untilKilled(t, db, "dblock_shares", "dblock_shares_pkey", name, pair)
	})

	t.Run("permits", func(t *testing.T) {
		name := "dead-permits"
		pair := func(owner string) {
			res, err := db.AcquirePermits(ctx, store.PermitParams{Name: name, Owner: owner, Limit: 4, Permits: 1, TTL: time.Minute})
			if err != nil || !res.Acquired {
				t.Fatalf("grant to %s: %+v, %v", owner, res, err)
			}
			if ok, err := db.ReleasePermits(ctx, res.Token, owner); err != nil || !ok {
				t.Fatalf("release by %s: %v, %v", owner, ok, err)
			}
		}
		for i := range churnOwners {
			pair(fmt.Sprintf("churn-%d", i))
		}
		untilKilled(t, db, "dblock_permits", "dblock_permits_name_idx", name, pair)
	})

	// A fair release's hand-off to the waiter first in the queue (and the
	// take of a waiter at the head, whose check of the waiters ahead is
	// the same).
	t.Run("hand-offs", func(t *testing.T) {
		name := "dead-hand-offs"
		p := store.AcquireParams{Name: name, Owner: "resident", Mode: dblock.ModeFair, TTL: time.Minute}
		res, err := db.AcquireLease(ctx, nil, p)
		if err != nil || !res.Acquired {
			t.Fatalf("first holder: %+v, %v", res, err)
		}
		holder, token := p.Owner, res.Token
		pair := func(owner string) {
			w, err := db.Enqueue(ctx, nil, name, owner, store.WaitExclusive, time.Minute)
			if err != nil {
				t.Fatalf("enqueue %s: %v", owner, err)
			}
			p.Owner = owner
			h, err := db.HandOver(ctx, name, holder, token, p, w.ID)
			if err != nil || !h.Handed {
				t.Fatalf("hand-off from %s to %s: %+v, %v", holder, owner, h, err)
			}
			holder, token = owner, h.Token
		}
		for i := range churnOwners {
			pair(fmt.Sprintf("churn-%d", i))
		}
		untilKilled(t, db, "dblock_waiters", "dblock_waiters_queue_idx", name, pair)
	})

	// A fair waiter's check (fairqueue's), and the gate's of the shared
	// locks' fair option (a semaphore's waiter here).
	checks := map[store.WaitKind]func(id int64) (live bool, ahead int, err error){
		store.WaitExclusive: func(id int64) (bool, int, error) {
			s, err := db.CheckWaiter(ctx, nil, "dead-"+string(store.WaitExclusive), id)
			return s.Live, s.Ahead, err
		},
		store.WaitSemaphore: func(id int64) (bool, int, error) {
			s, err := db.CheckGate(ctx, id)
			return s.Live, s.Queued, err
		},
	}
	for kind, check := range checks {
		t.Run("waiters "+string(kind), func(t *testing.T) {
			name := "dead-" + string(kind)
			pair := func(owner string) {
				w, err := db.Enqueue(ctx, nil, name, owner, kind, time.Minute)
				if err != nil {
					t.Fatalf("enqueue %s: %v", owner, err)
				}
				if live, ahead, err := check(w.ID); err != nil || !live || ahead != 0 {
					t.Fatalf("check of %s: live %v, %d ahead, %v", owner, live, ahead, err)
				}
				if ok, err := db.LeaveQueue(ctx, nil, w.ID); err != nil || !ok {
					t.Fatalf("leave by %s: %v, %v", owner, ok, err)
				}
			}
			for i := range churnOwners {
				pair(fmt.Sprintf("churn-%d", i))
			}
			untilKilled(t, db, "dblock_waiters", "dblock_waiters_queue_idx", name, pair)
		})
	}
}

// untilKilled runs pair for a new owner until a bitmap scan of index finds
// at most a few entries of name in table (the last rows deleted may still
// be visible to a transaction of another test), for a minute at most: a
// transaction of a test running beside it in the same database keeps the
// rows deleted since it began from being dead to all, and the loop waits
// for it to end.
func untilKilled(t *testing.T, db *store.DB, table, index, name string, pair func(owner string)) {
	t.Helper()
	const few = 5
	deadline := time.Now().Add(time.Minute)
	var n int64
	for i := 0; ; i++ {
		pair(fmt.Sprintf("last-%d", i))
		n = bitmapEntries(t, db, table, index, name)
		if n <= few {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: a bitmap scan of %s still returns %d entries of %q (at most %d once the deleted rows are dead): the scans of the name do not mark them",
		table, index, n, name, few)
}

// bitmapEntries is how many index entries of name a bitmap scan of index
// returns: the entries not (yet) marked dead.
func bitmapEntries(t *testing.T, db *store.DB, table, index, name string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, set := range []string{"enable_seqscan", "enable_indexscan", "enable_indexonlyscan"} {
		if _, err := tx.ExecContext(ctx, "SET LOCAL "+set+" = off"); err != nil {
			t.Fatal(err)
		}
	}
	var plan string
	q := fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM %s WHERE name = '%s'", table, name)
	if err := tx.QueryRowContext(ctx, q).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	n, ok := doc[0].Plan.bitmapRows(index)
	if !ok {
		t.Fatalf("no bitmap scan of %s in the plan: %s", index, plan)
	}
	return n
}

// planNode is a node of a JSON plan, as much of it as bitmapEntries reads.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	IndexName  string     `json:"Index Name"`
	ActualRows int64      `json:"Actual Rows"`
	Plans      []planNode `json:"Plans"`
}

// bitmapRows is the rows of the bitmap index scan of index in the tree.
func (p planNode) bitmapRows(index string) (int64, bool) {
	if p.NodeType == "Bitmap Index Scan" && p.IndexName == index {
		return p.ActualRows, true
	}
	for _, c := range p.Plans {
		if n, ok := c.bitmapRows(index); ok {
			return n, true
		}
	}
	return 0, false
}
