package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
)

// Notices watches PostgreSQL's release notices from a hub of its own, as
// another process would, and tells which of its subscriptions they woke:
// Settle releases a barrier name, and once the barrier's subscription
// wakes every notice sent before it was handled (one connection delivers
// them in order), so a subscription not woken then was not woken at all.
type Notices struct {
	t       testing.TB
	iso     *Isolated
	Hub     *wake.Hub
	barrier string
	bar     <-chan struct{}
}

// NewNotices starts the hub on iso (PostgreSQL). Its first connection
// wakes the subscriptions made before it: the barrier's alone, so that
// those made by Subscribe start empty.
func NewNotices(t testing.TB, iso *Isolated, barrier string) *Notices {
	t.Helper()
	n := &Notices{t: t, iso: iso, Hub: wake.New(iso.Store(), nil), barrier: barrier}
	n.cycle() // The barrier's row exists, so that its subscription marks it as listened for.
	var cancel func()
	n.bar, cancel = n.Hub.Subscribe(context.Background(), barrier)
	t.Cleanup(func() { cancel(); _ = n.Hub.Close() })
	n.wait(n.bar)
	return n
}

// Subscribe subscribes to name's notices for owner ("" for every owner's).
func (n *Notices) Subscribe(name, owner string) <-chan struct{} {
	ch, cancel := n.Hub.SubscribeFor(context.Background(), name, owner)
	n.t.Cleanup(cancel)
	return ch
}

// Settle returns once every notice sent before it was handled.
func (n *Notices) Settle() {
	n.t.Helper()
	n.cycle()
	n.wait(n.bar)
}

// cycle takes and releases the barrier name.
func (n *Notices) cycle() {
	n.t.Helper()
	ctx := context.Background()
	db := n.iso.Store()
	r, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: n.barrier, Owner: "barrier", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !r.Acquired {
		n.t.Fatalf("barrier: %+v %v", r, err)
	}
	if ok, err := db.ReleaseLease(ctx, nil, n.barrier, "barrier", r.Token); err != nil || !ok {
		n.t.Fatalf("barrier release: %v %v", ok, err)
	}
}

// Woken reports whether ch holds a wake-up, and empties it.
func Woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (n *Notices) wait(ch <-chan struct{}) {
	n.t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		n.t.Fatal("no wake-up from the notices' hub")
	}
}
