package faults

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
)

// TestFaultTakeAnswerLost: the head of a fair queue takes the name in one
// statement (the take of the head, its row deleted with it), the statement
// commits on the server, and its answer is lost (every proxied connection
// cut). The waiter must read the take back and return the lease it took
// (not queue again and re-enter the name), and once that lease is
// released the name is free at once.
func TestFaultTakeAnswerLost(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			px := newProxy(t, iso)
			// No heartbeat within the test: one sent as the proxy slows
			// its answer holds the waiter's writes (the take among them)
			// until it times out, past cutWhile's window.
			waiter, err := fairqueue.New(px.open(t), &fairqueue.Config{Logger: quiet, DisableNotify: true,
				HeartbeatInterval: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close()
			// The holder's Locker is another (no hand-off to the waiter),
			// on a direct connection.
			holder, err := fairqueue.New(iso.DB, &fairqueue.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			const name, ttl = "take-lost", 30 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			held, err := holder.Acquire(ctx, name, dblock.WithOwner("a"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
			if err != nil {
				t.Fatal(err)
			}
			// The waiter queues before the proxy slows its answers; the
			// holder releases once it has, and the waiter's take follows.
			type result struct {
				lease *dblock.Lease
				err   error
			}
			got := make(chan result, 1)
			go func() {
				lease, err := waiter.Acquire(ctx, name, dblock.WithOwner("b"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
				got <- result{lease, err}
			}()
			waitQueued(ctx, t, holder, name)
			taken := func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				h, err := iso.Store().LeaseHolder(ctx, nil, name)
				return err == nil && h.Owner == "b"
			}
			var lease *dblock.Lease
			err = cutWhile(t, px, taken, func(ctx context.Context) error {
				if err := held.Release(ctx); err != nil {
					t.Errorf("the holder's release: %v", err)
				}
				r := <-got
				lease = r.lease
				return r.err
			})
			if err != nil {
				t.Fatalf("Acquire whose take's answer was lost = %v, want the lease it took", err)
			}
			if lease.Owner() != "b" || lease.Token() <= held.Token() || lease.Reentry() != 1 {
				t.Fatalf("the waiter's lease: owner %q, token %d (the holder's %d), reentry %d", lease.Owner(), lease.Token(), held.Token(), lease.Reentry())
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("the waiter's release: %v", err)
			}
			phantomCheck(t, iso, name, ttl, 3*time.Second, "the release of a lease taken across a lost answer")
		})
	}
}
