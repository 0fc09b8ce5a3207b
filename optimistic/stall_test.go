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
			iso := dbtest.New(t, kind)
			dsn, proxy := locktest.StallProxy(t, iso)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := dialect.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open via proxy: %v", err)
			}
			defer db.Close()
			waiter, err := optimistic.New(db, &optimistic.Config{
				Logger: testLogger(t), StatementTimeout: time.Second, PollMax: 20 * time.Millisecond, DisableNotify: true,
			})
			if err != nil {
				t.Fatalf("new: %v", err)
			}
			defer func() { _ = waiter.Close() }()
			holder := newOptimistic(t, iso.DB)
			name := locktest.RandomName("stalled-waiter")
			held, err := holder.Acquire(ctx, name, dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			got := make(chan error, 1)
			go func() {
				// No deadline: only the statement timeout bounds a read.
				lease, err := waiter.Acquire(context.Background(), name)
				if err == nil {
					err = lease.Release(context.Background())
				}
				got <- err
			}()
			for deadline := time.Now().Add(30 * time.Second); db.SQL().Stats().OpenConnections == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("the waiter opened no connection")
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // Several polls on the connections it has.
			proxy.Stall()
			if err := held.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(45 * time.Second):
				t.Fatalf("waiter still waiting on a stalled connection")
			}
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
			iso := dbtest.New(t, kind)
			dsn, proxy := locktest.StallProxy(t, iso)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := dialect.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open via proxy: %v", err)
			}
			defer db.Close()
			const stmt = 500 * time.Millisecond
			waiter, err := optimistic.New(db, &optimistic.Config{
				Logger: testLogger(t), StatementTimeout: stmt, PollMax: 20 * time.Millisecond, DisableNotify: true,
			})
			if err != nil {
				t.Fatalf("new: %v", err)
			}
			defer func() { _ = waiter.Close() }()
			holder := newOptimistic(t, iso.DB)
			name := locktest.RandomName("vanished-server")
			held, err := holder.Acquire(ctx, name, dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			got := make(chan error, 1)
			go func() {
				lease, err := waiter.Acquire(context.Background(), name) // No deadline.
				if err == nil {
					err = lease.Release(context.Background())
				}
				got <- err
			}()
			for deadline := time.Now().Add(30 * time.Second); db.SQL().Stats().OpenConnections == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("the waiter opened no connection")
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // Several polls on the connections it has.
			proxy.Blackhole()
			if err := held.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			// A poll, an acquire and its read-back time out, and then some.
			time.Sleep(8 * stmt)
			proxy.Heal()
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(45 * time.Second):
				t.Fatalf("waiter still waiting after the server came back")
			}
		})
	}
}
