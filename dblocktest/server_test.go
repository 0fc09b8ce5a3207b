package dblocktest_test

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dblocktest"
	_ "github.com/dblock-go/dblock/dialect/mysql" // the servers the test uses
	_ "github.com/dblock-go/dblock/dialect/postgres"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// TestServer: a database of the test's own on each server, migrated, that
// another pool opened from the returned DSN shares.
func TestServer(t *testing.T) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, dsn := dblocktest.Server(t, dbtest.ServerDSN(kind))
			mine, err := optimistic.New(db, nil)
			noErr(t, err)
			defer mine.Close()
			lease := got(t)(mine.Acquire(ctx, "shared"))
			other, err := optimistic.New(dblocktest.Open(t, dsn), nil)
			noErr(t, err)
			defer other.Close()
			if _, err := other.TryAcquire(ctx, "shared"); err == nil {
				t.Fatal("a second pool on the returned DSN does not see the hold")
			}
			noErr(t, lease.Release(ctx))
			got(t)(other.TryAcquire(ctx, "shared", dblock.WithOwner("b")))
		})
	}
}
