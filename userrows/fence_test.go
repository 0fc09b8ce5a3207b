package userrows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/userrows"
)

// TestFencedUpdate: a holder whose lease ran out while it was paused, and
// whose name a newer holder took and wrote with, is refused by the database
// when it finally writes; the newer holder can write again and again with
// its own token, the same values included (MySQL counts changed rows only).
func TestFencedUpdate(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := iso.DB
		if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE reports (id INTEGER PRIMARY KEY, body VARCHAR(100) NOT NULL, fence BIGINT)`); err != nil {
			t.Fatalf("create table: %v", err)
		}
		if _, err := db.SQL().ExecContext(ctx, `INSERT INTO reports (id, body) VALUES (1, 'none')`); err != nil {
			t.Fatalf("insert: %v", err)
		}
		l, err := optimistic.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		name := locktest.RandomName("fenced")
		old, err := l.TryAcquire(ctx, name, dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
		if err != nil {
			t.Fatalf("first holder: %v", err)
		}
		write := func(lease *dblock.Lease, body string) error {
			return userrows.FencedUpdate(ctx, db, nil, userrows.FenceParams{Table: "reports", KeyColumn: "id", FenceColumn: "fence",
				Key: 1, Token: lease.Token(), Set: map[string]any{"body": body}})
		}
		if err := write(old, "old"); err != nil {
			t.Fatalf("first holder's write: %v", err)
		}
		<-old.Done() // Its lease runs out (the holder "paused").
		next, err := l.Acquire(ctx, name, dblock.WithOwner("next"), dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
		if err != nil {
			t.Fatalf("next holder: %v", err)
		}
		for range 2 {
			if err := write(next, "next"); err != nil {
				t.Fatalf("next holder's write: %v", err)
			}
		}
		err = write(old, "stale")
		var conflict *dblock.ConflictError
		if !errors.Is(err, dblock.ErrConflict) || !errors.As(err, &conflict) || !conflict.Fence ||
			conflict.Want != int64(old.Token()) || conflict.Found != int64(next.Token()) {
			t.Fatalf("superseded holder's write = %v, want a fence conflict (token %d, fence %d)", err, old.Token(), next.Token())
		}
		var body string
		if err := store.Of(db).GetContext(ctx, &body, `SELECT body FROM reports WHERE id = 1`); err != nil || body != "next" {
			t.Fatalf("row body %q (%v), want the newer holder's", body, err)
		}
		err = userrows.FencedUpdate(ctx, db, nil, userrows.FenceParams{Table: "reports", KeyColumn: "id", FenceColumn: "fence",
			Key: 2, Token: next.Token()})
		if !errors.As(err, &conflict) || conflict.Found != -1 {
			t.Fatalf("write to a missing row = %v, want a conflict with Found -1", err)
		}
		for label, p := range map[string]userrows.FenceParams{
			"bad table":      {Table: "reports; DROP TABLE reports", KeyColumn: "id", FenceColumn: "fence", Key: 1, Token: next.Token()},
			"fence is key":   {Table: "reports", KeyColumn: "id", FenceColumn: "id", Key: 1, Token: next.Token()},
			"sets the fence": {Table: "reports", KeyColumn: "id", FenceColumn: "fence", Key: 1, Token: next.Token(), Set: map[string]any{"fence": 0}},
			"no token":       {Table: "reports", KeyColumn: "id", FenceColumn: "fence", Key: 1},
		} {
			if err := userrows.FencedUpdate(ctx, db, nil, p); !errors.Is(err, dblock.ErrInvalidOption) {
				t.Errorf("%s: %v, want ErrInvalidOption", label, err)
			}
		}
		if err := next.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}
