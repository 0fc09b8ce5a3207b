package optimistic_test

import (
	"testing"

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

func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.Run(t, newLocker, locktest.Caps{Lease: true, Reentrant: true, Fencing: true})
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
