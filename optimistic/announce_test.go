package optimistic

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
)

// TestReleaseAnnounced (PostgreSQL): a release that the Locker's own next
// waiter takes is not announced to other processes' waiters; the release
// of a name nobody waits for is.
func TestReleaseAnnounced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iso := dbtest.New(t, store.Postgres)
	name, barrier := locktest.RandomName("announced"), locktest.RandomName("barrier")
	watch := newWatcher(t, iso, name, barrier)
	l := newGateLocker(t, iso)
	held, err := l.Acquire(ctx, name, dblock.WithOwner("a1"))
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *dblock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name, dblock.WithOwner("a2"))
		if err != nil {
			t.Errorf("a2: %v", err)
		}
		next <- lease
	}()
	waitLine(t, l, name, 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.FailNow()
	}
	if watch.announced() {
		t.Fatal("a release that the Locker's own waiter took was announced")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !watch.announced() {
		t.Fatal("the release of a name nobody waits for was not announced")
	}
}

// watcher sees, from a hub of its own (as another process would), whether
// a name's release was announced: a barrier name's release, once it wakes
// its subscriber, proves every notice before it was handled.
type watcher struct {
	t       *testing.T
	iso     *dbtest.Isolated
	barrier string
	ch, bar <-chan struct{}
}

func newWatcher(t *testing.T, iso *dbtest.Isolated, name, barrier string) *watcher {
	t.Helper()
	hub := wake.New(iso.Store(), nil)
	w := &watcher{t: t, iso: iso, barrier: barrier}
	// The hub's first connection wakes the subscribers made before it:
	// the barrier's alone, so that the name's starts empty.
	var c1, c2 func()
	w.bar, c1 = hub.Subscribe(barrier)
	w.wait(w.bar)
	w.ch, c2 = hub.Subscribe(name)
	t.Cleanup(func() { c1(); c2(); _ = hub.Close() })
	return w
}

// announced reports whether a release of the name was announced since the
// last call.
func (w *watcher) announced() bool {
	w.t.Helper()
	ctx := context.Background()
	db := w.iso.Store()
	r, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: w.barrier, Owner: "barrier", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !r.Acquired {
		w.t.Fatalf("barrier: %+v %v", r, err)
	}
	if ok, err := db.ReleaseLease(ctx, nil, w.barrier, "barrier", r.Token); err != nil || !ok {
		w.t.Fatalf("barrier release: %v %v", ok, err)
	}
	w.wait(w.bar)
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

func (w *watcher) wait(ch <-chan struct{}) {
	w.t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		w.t.Fatal("no wake-up from the watcher's hub")
	}
}
