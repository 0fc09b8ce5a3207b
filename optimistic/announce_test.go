package optimistic

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestReleaseAnnounced (PostgreSQL): a release that the Locker's own next
// waiter takes is not announced to other processes' waiters (a
// subscription for another owner, b1, as such a waiter's); a release that
// frees the name for such a waiter is. (A reservation is announced to the
// reserver alone, so the waiter's own would not count against this; it
// no longer reserves a name its Locker just released: keep skips that
// while the release's kick is pending.)
func TestReleaseAnnounced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iso := dbtest.New(t, store.Postgres)
	name, barrier := locktest.RandomName("announced"), locktest.RandomName("barrier")
	notices := dbtest.NewNotices(t, iso, barrier)
	l := newGateLocker(t, iso)
	held, err := l.Acquire(ctx, name, dblock.WithOwner("a1"))
	if err != nil {
		t.Fatal(err)
	}
	// b1 subscribes as a waiter in another process would, finding the
	// name held: its hub marks the row as listened for.
	announced := notices.Subscribe(name, "b1")
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
	if notices.Settle(); dbtest.Woken(announced) {
		t.Fatal("a release that the Locker's own waiter took was announced")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if notices.Settle(); !dbtest.Woken(announced) {
		t.Fatal("the release of a name another process's waiter listens for was not announced")
	}
}
