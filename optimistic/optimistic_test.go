package optimistic_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
)

func TestMain(m *testing.M) {
	locktest.WorkerMain(func(db *dialect.DB) dblock.Locker {
		l, err := optimistic.New(db, nil)
		if err != nil {
			panic(err)
		}
		return l
	})
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

func newLocker(t *testing.T, iso *dbtest.Isolated) dblock.Locker {
	t.Helper()
	l, err := optimistic.New(iso.DB, &optimistic.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	return l
}

// guard is the suite's view of Locker.Guard.
func guard(ctx context.Context, l dblock.Locker, tx *sqlx.Tx, lease *dblock.Lease) error {
	return l.(*optimistic.Locker).Guard(ctx, tx, lease)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.Run(t, newLocker, locktest.Caps{Lease: true, Reentrant: true, Fencing: true, Guard: guard})
}

func TestProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process stress test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		locktest.RunProcesses(t, iso, dblock.ModeOptimistic, 4, 500)
	})
}
