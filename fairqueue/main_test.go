package fairqueue_test

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

func TestMain(m *testing.M) {
	locktest.WorkerMain(func(db *dialect.DB) dblock.Locker {
		l, err := fairqueue.New(db, nil)
		if err != nil {
			panic(err)
		}
		return l
	})
	fifoWorkerMain()
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

// testConfig is a Config with test-friendly heartbeats and logs sent to t.
func testConfig(t *testing.T) *fairqueue.Config {
	return &fairqueue.Config{
		Logger:            testLogger(t),
		HeartbeatInterval: time.Second,
		HeartbeatTimeout:  10 * time.Second,
	}
}

func newLocker(t *testing.T, iso *dbtest.Isolated) dblock.Locker {
	t.Helper()
	return newFair(t, iso.DB, testConfig(t))
}

func newFair(t *testing.T, db *dialect.DB, cfg *fairqueue.Config) *fairqueue.Locker {
	t.Helper()
	l, err := fairqueue.New(db, cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	return l
}

// testLogger sends the Locker's warnings to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
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
		locktest.RunProcesses(t, iso, dblock.ModeFair, 4, 200)
	})
}
