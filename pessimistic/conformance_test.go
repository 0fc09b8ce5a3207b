package pessimistic_test

import (
	"strings"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// sqliteWholeDatabase lists the suite's checks that hold one name while
// taking another. A pessimistic lock on SQLite is a write transaction on the
// whole database, so there the second acquisition waits for the first
// (documented in doc.go); these checks cannot pass on SQLite by design.
var sqliteWholeDatabase = []string{"/Close/", "/OwnerOnlyRelease/"}

// TestConformance runs the shared suite. Reentrant is false because the
// suite's reentrancy check also re-enters from another process (another
// pool) with the same owner, which a transaction-held lock cannot allow;
// reentrancy within a process is tested in TestReentrant.
func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.Run(t, func(t *testing.T, iso *dbtest.Isolated) dblock.Locker {
		if iso.Kind == store.SQLite {
			for _, c := range sqliteWholeDatabase {
				if strings.Contains(t.Name()+"/", c) {
					t.Skip("SQLite: a pessimistic lock holds the whole database, so a second name waits for the first")
				}
			}
		}
		return mustNew(iso.DB).AsLocker()
	}, locktest.Caps{Lease: false, Reentrant: false, Fencing: true})
}

// TestProcesses is the suite's multi-process stress test for this mode.
func TestProcesses(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		locktest.RunProcesses(t, iso, dblock.ModePessimistic, 4, 200)
	})
}

// TestProcessesMixedModes: OS processes alternating optimistic and
// pessimistic acquisitions of one name never overlap, and tokens increase
// across both modes.
func TestProcessesMixedModes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		locktest.RunProcesses(t, iso, modeMixed, 4, 100)
	})
}
