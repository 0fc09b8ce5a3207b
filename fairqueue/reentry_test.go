package fairqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// TestReentryAcrossLockers: two Lockers (two processes, in effect) share an
// owner; A acquires twice, then B once. B's lease reports the owner's count
// as the row has it where the acquisition reads it: 3 for both modes on
// PostgreSQL and SQLite, and for the fair mode on MariaDB (its one call
// reads the row). An optimistic acquisition on MySQL or MariaDB reports the
// count only when it inserts the row, and the fair one's three statements
// on MySQL 8 likewise: there B reports its own Locker's handles, 1
// (documented on Lease.Reentry).
func TestReentryAcrossLockers(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fairA, fairB := newFair(t, iso.DB, testConfig(t)), newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = fairA.Close(); _ = fairB.Close() })
		optA, err := optimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		optB, err := optimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = optA.Close(); _ = optB.Close() })

		counts := map[string]int{}
		for mode, pair := range map[string][2]dblock.Locker{"fair": {fairA, fairB}, "optimistic": {optA, optB}} {
			name, owner := locktest.RandomName("reentry-"+mode), dblock.WithOwner("shared-"+mode)
			var leases []*dblock.Lease
			for _, l := range []dblock.Locker{pair[0], pair[0], pair[1]} {
				lease, err := l.Acquire(ctx, name, owner, dblock.WithWait(10*time.Second))
				if err != nil {
					t.Fatalf("%s: acquire: %v", mode, err)
				}
				leases = append(leases, lease)
			}
			counts[mode] = leases[2].Reentry()
			for _, lease := range leases {
				if err := lease.Release(ctx); err != nil {
					t.Fatalf("%s: release: %v", mode, err)
				}
			}
		}
		wantFair, wantOpt := 3, 3
		if iso.Kind == store.MySQL {
			wantOpt = 1
			if iso.Store().Dialect.Queue().Direct == "" {
				wantFair = 1
			}
		}
		if counts["fair"] != wantFair || counts["optimistic"] != wantOpt {
			t.Fatalf("B's Reentry: fair %d, optimistic %d; want %d, %d", counts["fair"], counts["optimistic"], wantFair, wantOpt)
		}
	})
}

// TestReentryWhileQueued: an owner that holds a name re-enters at once
// while another owner's waiter of the same Locker queues for it (so that
// the re-entry joins the queue without a direct attempt, where the enqueue
// answers the first check): it never waits behind a waiter that waits for
// its own release.
func TestReentryWhileQueued(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = l.Close() })
		name, o, p := locktest.RandomName("reentry-queued"), dblock.WithOwner("o"), dblock.WithOwner("p")

		held, err := l.Acquire(ctx, name, o)
		if err != nil {
			t.Fatalf("o: acquire: %v", err)
		}
		queued := make(chan struct{}, 1)
		got := make(chan error, 1)
		go func() {
			pctx := fairqueue.WithPositionFunc(ctx, func(fairqueue.Position) {
				select {
				case queued <- struct{}{}:
				default:
				}
			})
			lease, err := l.Acquire(pctx, name, p, dblock.WithWait(30*time.Second))
			if err == nil {
				err = lease.Release(ctx)
			}
			got <- err
		}()
		select {
		case <-queued:
		case err := <-got:
			t.Fatalf("p ended before it queued: %v", err)
		case <-ctx.Done():
			t.Fatal("hang guard: p never queued")
		}
		again, err := l.Acquire(ctx, name, o, dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("o: re-entry while p queues: %v", err)
		}
		if again.Token() != held.Token() {
			t.Fatalf("o: re-entry token %d, want the held %d", again.Token(), held.Token())
		}
		select {
		case err := <-got:
			t.Fatalf("p acquired while o held: %v", err)
		default:
		}
		for _, lease := range []*dblock.Lease{again, held} {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("o: release: %v", err)
			}
		}
		if err := <-got; err != nil {
			t.Fatalf("p: %v", err)
		}
	})
}
