package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestShareReleaseOutwaitsContention: a reader's release that meets the
// name's row (on SQLite, the database's write lock) held by another
// transaction for longer than an acquisition would wait keeps trying, and
// succeeds once that transaction ends; nothing of the share is left.
func TestShareReleaseOutwaitsContention(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := "share:outwait"
		res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: "r", TTL: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("read: %+v, %v", res, err)
		}
		// Another transaction holds the name's row for 600 ms.
		conn, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		begin, lock := "BEGIN", db.Rebind("SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE")
		if iso.Kind == store.SQLite {
			begin, lock = "BEGIN IMMEDIATE", db.Rebind("UPDATE dblock_locks SET name = name WHERE name = ?")
		}
		if _, err := conn.ExecContext(ctx, begin); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, lock, name); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(600*time.Millisecond, func() { _, _ = conn.ExecContext(ctx, "COMMIT") })

		released, err := db.ReleaseShare(ctx, name, "r", res.Token)
		if err != nil || !released {
			t.Fatalf("release behind a 600 ms transaction: %v, %v; want released", released, err)
		}
		var left int
		if err := db.GetContext(ctx, &left, db.Rebind("SELECT COUNT(*) FROM dblock_shares WHERE name = ?"), name); err != nil || left != 0 {
			t.Fatalf("shares left: %d, %v", left, err)
		}
	})
}
