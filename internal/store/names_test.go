package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestAdminInvalidNames checks that the administrators' calls that take
// names (those behind `dblock status` and `dblock release`) refuse a bad one
// with dblock.ErrInvalidName, also next to good names, before it reaches the
// database, and change no row.
func TestAdminInvalidNames(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := iso.DB
		good := locktest.RandomName("good")
		if _, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{
			Name: good, Owner: "someone", Mode: dblock.ModeOptimistic, TTL: time.Hour,
		}); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		dbtest.AddWaiter(t, db, good, "waiter", time.Hour)

		calls := map[string]func(ctx context.Context, name string) error{
			"ForceRelease": func(ctx context.Context, name string) error {
				_, err := store.Of(db).ForceRelease(ctx, nil, name)
				return err
			},
			"ListLocks": func(ctx context.Context, name string) error {
				_, err := store.Of(db).ListLocks(ctx, []string{good, name})
				return err
			},
			"ListWaiters": func(ctx context.Context, name string) error {
				_, err := store.Of(db).ListWaiters(ctx, []string{name, good})
				return err
			},
			"ProbeTxHolds": func(ctx context.Context, name string) error {
				_, err := store.Of(db).ProbeTxHolds(ctx, []string{good, name}, 0)
				return err
			},
		}
		before := lockedRows(ctx, t, store.Of(db))
		for what, name := range map[string]string{
			"empty": "", "too long": strings.Repeat("n", dblock.MaxNameLen+1), "invalid UTF-8": "x\xff", "NUL byte": "x\x00y",
		} {
			for label, call := range calls {
				if err := call(ctx, name); !errors.Is(err, dblock.ErrInvalidName) {
					t.Errorf("%s with a name %s: %v, want ErrInvalidName", label, what, err)
				}
			}
		}
		if after := lockedRows(ctx, t, store.Of(db)); after != before {
			t.Errorf("calls with bad names changed the tables: %q, then %q", before, after)
		}
	})
}

// lockedRows summarises the lock tables, to compare before and after.
func lockedRows(ctx context.Context, t *testing.T, db *store.DB) string {
	t.Helper()
	var locks, owners, waiters int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(owner) FROM dblock_locks").Scan(&locks, &owners); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM dblock_waiters").Scan(&waiters); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d locks (%d held), %d waiters", locks, owners, waiters)
}
