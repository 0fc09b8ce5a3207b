package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestSharePeriodOverExpiredHolder: a reader that begins a period on a
// name whose exclusive lease expired leaves nothing of that holder in the
// row. The next writer's token exceeds the period's, and the reader after
// that writer's release begins a period of its own with a greater token
// again: it never joins the writer's token as if the writer had
// downgraded.
func TestSharePeriodOverExpiredHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		name := "share:over-expired"
		write := func(owner string, ttl time.Duration) dblock.Token {
			t.Helper()
			res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
			if err != nil || !res.Acquired {
				t.Fatalf("write %s: %+v, %v", owner, res, err)
			}
			return res.Token
		}
		read := func(owner string) dblock.Token {
			t.Helper()
			res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: owner, TTL: 30 * time.Second})
			if err != nil || !res.Acquired {
				t.Fatalf("read %s: %+v, %v", owner, res, err)
			}
			return res.Token
		}
		w1 := write("w1", 200*time.Millisecond)
		time.Sleep(400 * time.Millisecond) // w1's lease expires unreleased.
		r1 := read("r1")
		if r1 <= w1 {
			t.Fatalf("period over the expired writer: token %d, writer's %d", r1, w1)
		}
		if ok, err := db.ReleaseShare(ctx, name, "r1", r1); err != nil || !ok {
			t.Fatalf("release r1: %v, %v", ok, err)
		}
		w2 := write("w2", 30*time.Second)
		if w2 <= r1 {
			t.Fatalf("writer after the period: token %d, period's %d", w2, r1)
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "w2", w2); err != nil || !ok {
			t.Fatalf("release w2: %v, %v", ok, err)
		}
		if r2 := read("r2"); r2 <= w2 {
			t.Fatalf("reader after the writer's release: token %d, writer's %d (joined a period the writer never began)", r2, w2)
		}
	})
}

// TestReleaseJoinedShare: a reader that joined a running period is told so,
// and its release (ReleaseJoinedShare, MariaDB's procedure of MySQL
// migration 00023) leaves the name held while another reader holds it, is
// refused the second time, and, as the last reader's, frees the name at
// once, as ReleaseShare does.
func TestReleaseJoinedShare(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		name := "share:joined"
		read := func(owner string) store.ShareResult {
			t.Helper()
			res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: owner, TTL: 30 * time.Second})
			if err != nil || !res.Acquired {
				t.Fatalf("read %s: %+v, %v", owner, res, err)
			}
			return res
		}
		writeTry := func() (dblock.Token, bool) {
			t.Helper()
			res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "w", Mode: dblock.ModeOptimistic, TTL: 30 * time.Second})
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			return res.Token, res.Acquired
		}
		release := func(joined bool, owner string, token dblock.Token, want bool) {
			t.Helper()
			rel := db.ReleaseShare
			if joined {
				rel = db.ReleaseJoinedShare
			}
			if ok, err := rel(ctx, name, owner, token); err != nil || ok != want {
				t.Fatalf("release of %s (joined %v): %v, %v; want %v", owner, joined, ok, err, want)
			}
		}
		oneStatement := iso.Kind != store.SQLite // Joined is told where the acquisition is one statement.
		// The second reader moves the first, recorded in the name's row
		// (PostgreSQL, MariaDB), into dblock_shares, and gets its whole
		// TTL; the third joins.
		first, second, third := read("r1"), read("r2"), read("r3")
		if first.Joined || second.Joined || third.Joined != oneStatement {
			t.Fatalf("joined: began %v, second %v, third %v; want false, false, %v",
				first.Joined, second.Joined, third.Joined, oneStatement)
		}
		release(true, "r3", third.Token, true)
		release(true, "r3", third.Token, false)
		if _, ok := writeTry(); ok {
			t.Fatal("a writer took the name while r1 and r2 still read it")
		}
		release(second.Joined, "r2", second.Token, true)
		if _, ok := writeTry(); ok {
			t.Fatal("a writer took the name while r1 still read it")
		}
		release(false, "r1", first.Token, true)
		w, ok := writeTry()
		if !ok {
			t.Fatal("the writer was refused after the last reader's release")
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "w", w); err != nil || !ok {
			t.Fatalf("release w: %v, %v", ok, err)
		}
		third, fourth := read("r3"), read("r4")
		release(false, "r3", third.Token, true)
		release(true, "r4", fourth.Token, true) // The last reader, joined: the name is free at once.
		if _, ok := writeTry(); !ok {
			t.Fatal("the writer was refused after the last (joined) reader's release")
		}
	})
}

// TestConcurrentLastReleases: the readers of one name released all at
// once leave the name free at once, however their releases interleave (on
// PostgreSQL a release that row-locks another reader's share, or counts
// under the name's advisory lock; on MariaDB the joined release, one
// statement or MySQL migration 00023's procedure): a writer takes it right
// after, in every round, and no share is left. Every other round releases
// the readers that did not join first, so that the last releases are all
// joined ones.
func TestConcurrentLastReleases(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		const readers, rounds = 8, 25
		for round := range rounds {
			name := fmt.Sprintf("share:last-releases/%d", round)
			res := make([]store.ShareResult, readers)
			for i := range res {
				var err error
				res[i], err = db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: fmt.Sprintf("r%d", i), TTL: time.Minute})
				if err != nil || !res[i].Acquired {
					t.Fatalf("round %d: read r%d: %+v, %v", round, i, res[i], err)
				}
			}
			if round%2 == 1 {
				res = releaseUnjoined(t, db, name, res)
			}
			releaseAll(t, db, name, res)
			w, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "w", Mode: dblock.ModeOptimistic, TTL: time.Minute})
			if err != nil || !w.Acquired {
				t.Fatalf("round %d: the writer after every reader's release: %+v, %v", round, w, err)
			}
			var left int
			if err := db.GetContext(ctx, &left, db.Rebind("SELECT COUNT(*) FROM dblock_shares WHERE name = ?"), name); err != nil || left != 0 {
				t.Fatalf("round %d: shares left: %d, %v", round, left, err)
			}
		}
	})
}

// releaseUnjoined releases, one by one, the readers of res (reader i is
// owner ri) whose share did not join a running period, and returns res
// with those left out (zero values).
func releaseUnjoined(t *testing.T, db *store.DB, name string, res []store.ShareResult) []store.ShareResult {
	t.Helper()
	left := make([]store.ShareResult, len(res))
	for i, r := range res {
		if r.Joined {
			left[i] = r
			continue
		}
		if ok, err := db.ReleaseShare(context.Background(), name, fmt.Sprintf("r%d", i), r.Token); err != nil || !ok {
			t.Fatalf("release of r%d: %v, %v", i, ok, err)
		}
	}
	return left
}

// releaseAll releases the readers' shares of name at once (reader i is
// owner ri; a zero result was released already), each on its goroutine,
// through the release its acquisition asks for.
func releaseAll(t *testing.T, db *store.DB, name string, res []store.ShareResult) {
	t.Helper()
	ctx := context.Background()
	start := make(chan struct{})
	errs := make(chan error, len(res))
	for i, r := range res {
		if !r.Acquired {
			errs <- nil
			continue
		}
		go func() {
			<-start
			rel := db.ReleaseShare
			if r.Joined {
				rel = db.ReleaseJoinedShare
			}
			ok, err := rel(ctx, name, fmt.Sprintf("r%d", i), r.Token)
			if err == nil && !ok {
				err = fmt.Errorf("release of r%d refused", i)
			}
			errs <- err
		}()
	}
	close(start)
	for range res {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
