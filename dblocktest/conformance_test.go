package dblocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dblocktest"
	"github.com/dblock-go/dblock/internal/locktest"
)

// memoryEnv is the conformance suite's view of an in-memory Database whose
// clock follows real time (the suite's leases run out in real time).
type memoryEnv struct{ db *dblocktest.Database }

func newMemoryEnv(t *testing.T) locktest.Env {
	clock := dblocktest.NewClock(time.Now())
	stop := clock.FollowRealTime(5 * time.Millisecond)
	t.Cleanup(stop)
	return &memoryEnv{db: dblocktest.NewDatabase(clock)}
}

func (e *memoryEnv) Locker(*testing.T, bool) dblock.Locker {
	return dblocktest.New(&dblocktest.Config{Database: e.db})
}

func (e *memoryEnv) TakeOver(_ *testing.T, _ context.Context, name, owner string) {
	e.db.TakeOver(name, owner)
}

func (e *memoryEnv) HolderOwner(_ *testing.T, _ context.Context, name string) string {
	h, _ := e.db.Holder(name)
	return h.Owner
}

func (e *memoryEnv) ForceRelease(t *testing.T, _ context.Context, name string) {
	if !e.db.ForceRelease(name) {
		t.Fatalf("force release of %q: not held", name)
	}
}

func (e *memoryEnv) WaitExpired(t *testing.T, ctx context.Context, name string) {
	for {
		h, ok := e.db.Holder(name)
		if !ok || !h.ExpiresAt.After(e.db.Clock().Now()) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%q never expired", name)
		}
		time.Sleep(time.Millisecond)
	}
}

func (e *memoryEnv) ReleaseAs(_ context.Context, name, owner string, token dblock.Token) (bool, error) {
	return e.db.ReleaseAs(name, owner, token), nil
}

func (e *memoryEnv) Reap(*testing.T, context.Context, string) {} // no rows: a free name is gone already

func (e *memoryEnv) Residue(*testing.T) (names, held, waiters int) {
	n := len(e.db.Holders())
	return n, n, 0
}

func (e *memoryEnv) InUse() int { return 0 }

// TestConformance: the in-memory Locker passes the conformance suite of
// the real modes (the checks that need no database of their own).
func TestConformance(t *testing.T) {
	locktest.RunEnv(t, newMemoryEnv, locktest.Caps{Lease: true, Reentrant: true, Fencing: true})
}
