package optimistic_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// TestWaiterGivesUpStalledConnection: a waiter whose connections stop
// answering (black-holed) while it polls gives each read up after
// Config.StatementTimeout, even when its ctx has no deadline, and takes the
// name once it is released. (SQLite runs in process: no connection to lose.)
func TestWaiterGivesUpStalledConnection(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			w := newProxiedWaiter(t, kind, time.Second, "stalled-waiter")
			w.proxy.Stall()
			w.releaseHolder()
			w.wantLease()
		})
	}
}

// TestWaiterRidesOutVanishedServer: a waiter (its ctx without a deadline)
// whose server stops answering altogether, on its connections and on any
// new one, for longer than its statement, its read-back and several polls
// take (its acquire's outcome unknown and not settled), goes on waiting:
// once the server answers again it settles the outcome and takes the name
// released meanwhile. It must not end with the statement's timeout.
func TestWaiterRidesOutVanishedServer(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			const stmt = 500 * time.Millisecond
			w := newProxiedWaiter(t, kind, stmt, "vanished-server")
			w.proxy.Blackhole()
			w.releaseHolder()
			// A poll, an acquire and its read-back time out, and then some.
			time.Sleep(8 * stmt)
			w.proxy.Heal()
			w.wantLease()
		})
	}
}

// proxiedWaiter is a waiter's Acquire (its ctx without a deadline) through
// a locktest.Proxy, polling a name another Locker holds on a direct
// connection.
type proxiedWaiter struct {
	t     *testing.T
	ctx   context.Context
	proxy *locktest.Proxy
	held  *dblock.Lease
	got   chan error // The waiter's Acquire and Release.
}

// newProxiedWaiter starts the waiter (StatementTimeout stmt) and returns
// once it has polled on connections of its own for a while.
func newProxiedWaiter(t *testing.T, kind store.Kind, stmt time.Duration, prefix string) *proxiedWaiter {
	t.Helper()
	iso := dbtest.New(t, kind)
	dsn, proxy := locktest.StallProxy(t, iso)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open via proxy: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	waiter, err := optimistic.New(db, &optimistic.Config{
		Logger: testLogger(t), StatementTimeout: stmt, PollMax: 20 * time.Millisecond, DisableNotify: true,
	})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	name := locktest.RandomName(prefix)
	held, err := newOptimistic(t, iso.DB).Acquire(ctx, name, dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	w := &proxiedWaiter{t: t, ctx: ctx, proxy: proxy, held: held, got: make(chan error, 1)}
	go func() {
		lease, err := waiter.Acquire(context.Background(), name) // No deadline.
		if err == nil {
			err = lease.Release(context.Background())
		}
		w.got <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); db.SQL().Stats().OpenConnections == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter opened no connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // Several polls on the connections it has.
	return w
}

// releaseHolder releases the name the waiter waits for.
func (w *proxiedWaiter) releaseHolder() {
	w.t.Helper()
	if err := w.held.Release(w.ctx); err != nil {
		w.t.Fatalf("release: %v", err)
	}
}

// wantLease waits for the waiter to take the name (and release it).
func (w *proxiedWaiter) wantLease() {
	w.t.Helper()
	select {
	case err := <-w.got:
		if err != nil {
			w.t.Fatalf("waiter: %v", err)
		}
	case <-time.After(45 * time.Second):
		w.t.Fatalf("waiter still waiting")
	}
}
