package fairqueue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/store"
)

// TestHandOverFailureReleases: a hand-off statement that fails (here
// MariaDB's call, refusing a mode longer than its parameter) did nothing;
// the release goes on as a plain release, and the claimed waiter sleeps on,
// claimable again, its row kept.
func TestHandOverFailureReleases(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := context.Background()
	l, err := New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if l.rows == nil {
		t.Skip("MySQL 8 hands nothing over")
	}
	const name = "hand-over-fails"
	lease, err := l.Acquire(ctx, name, dblock.WithOwner("a"))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := l.db.Enqueue(ctx, nil, name, "b", store.WaitExclusive, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := &slot{id: tk.ID, created: time.Now(), Slot: handoff.Slot{State: handoff.Parked, Wake: make(chan struct{}, 1)},
		params: store.AcquireParams{Name: name, Owner: "b", Mode: strings.Repeat("m", 200), TTL: time.Minute}}
	l.line.join(name, s)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release with a failing hand-off: %v", err)
	}
	if h, err := l.db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
		t.Fatalf("the name after the release: %+v %v", h, err)
	}
	if c, err := l.db.CheckWaiter(ctx, nil, name, tk.ID); err != nil || !c.Live {
		t.Fatalf("the waiter after a failed hand-off: %+v %v", c, err)
	}
	if s.State != handoff.Parked || s.Result != nil {
		t.Fatalf("the claimed waiter after a failed hand-off: state %d, result %+v", s.State, s.Result)
	}
}
