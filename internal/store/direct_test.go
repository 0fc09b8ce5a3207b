package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestDirectStatements: on MariaDB a fair direct acquisition of a free name
// is one statement as the server counts them (its session's Questions,
// which count none run inside a procedure): the call of MySQL migration
// 00027. With the procedure dropped (a schema before that migration) it is
// three: a look at the queue, the take, the read of the waiters after it.
func TestDirectStatements(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		drop bool
		want int64
	}{{"the call", false, 1}, {"before-00027", true, 3}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, store.MySQL)
			if iso.Store().Dialect.Queue().Direct == "" {
				t.Skip("MySQL 8 has no direct acquire's call (TestQueueGuard counts its three statements)")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c.drop {
				if _, err := iso.Store().ExecContext(ctx, "DROP PROCEDURE dblock_acquire_direct"); err != nil {
					t.Fatal(err)
				}
			}
			db, err := dialect.Open(ctx, iso.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SQL().SetMaxOpenConns(1) // One session: its Questions are ours.
			if got := directStatements(ctx, t, db); got != c.want {
				t.Fatalf("a direct acquisition sent %d statements, want %d", got, c.want)
			}
		})
	}
}

// directStatements takes and releases a free name twice (the first call
// of a schema without the procedure is refused once; the statements are
// prepared), then counts what the third take sends.
func directStatements(ctx context.Context, t *testing.T, db *dialect.DB) int64 {
	t.Helper()
	const name, owner = "direct-statements", "o"
	take := func() {
		t.Helper()
		r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeFair,
			TTL: time.Minute, QueueGuard: true})
		if err != nil || !r.Acquired {
			t.Fatalf("direct acquisition of a free name: %+v %v", r, err)
		}
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, name, owner, r.Token); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	questions := func() int64 {
		t.Helper()
		var k string
		var n int64
		if err := db.SQL().QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	take()
	take()
	before := questions()
	take()
	// Less the release and the second read of the status.
	return questions() - before - 2
}
