package main

import (
	"context"
	"fmt"
	"io"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// Scenario keys of the shared locks.
const (
	keyRead          = "read"
	keySemaphore     = "semaphore"
	keyReadFair      = "read-fair"
	keySemaphoreFair = "semaphore-fair"
	// sharedReaders is the goroutine count of the readers-on-one-name cell.
	sharedReaders = 32
)

func init() {
	register(&scenario{
		key: keyRead, order: 75, title: "dblock rwlock AcquireRead+Release",
		about: "rwlock.New(db, nil); AcquireRead with no options (30 s lease renewed), then Release: one " +
			"call each of a server-side function (PostgreSQL) or procedure (MariaDB). Contended cells: readers share the name.",
		resetTables: []string{"dblock_shares"}, shared: true, setup: readSetup(false),
	})
	register(&scenario{
		key: keySemaphore, order: 76, title: "dblock semaphore Acquire+Release (limit 64, 1 permit)",
		about: "semaphore.New(db, nil); Acquire(name, 64, 1), then Release: a grant is one call of a function " +
			"(PostgreSQL) or procedure (MariaDB), a release one statement.",
		resetTables: []string{"dblock_permits", "dblock_semaphores"}, shared: true, setup: semaphoreSetup(false),
	})
	register(&scenario{
		key: keyReadFair, order: 77, title: "dblock rwlock AcquireRead+Release, Config.Fair",
		about: "rwlock.New(db, &rwlock.Config{Fair: true}): `read`'s pair behind the fair queue (a look at the " +
			"queue first; a refused reader queues in dblock_waiters).",
		resetTables: []string{"dblock_shares", "dblock_waiters"}, shared: true, setup: readSetup(true),
	})
	register(&scenario{
		key: keySemaphoreFair, order: 78, title: "dblock semaphore Acquire+Release (limit 64, 1 permit), Config.Fair",
		about:       "semaphore.New(db, &semaphore.Config{Fair: true}): `semaphore`'s pair behind the fair queue.",
		resetTables: []string{"dblock_permits", "dblock_semaphores", "dblock_waiters"}, shared: true,
		setup: semaphoreSetup(true),
	})
}

// readSetup builds the read cells' instance: an rwlock Locker, fair or not.
func readSetup(fair bool) func(context.Context, *env, bool) (*instance, error) {
	return func(ctx context.Context, e *env, _ bool) (*instance, error) {
		l, err := rwlock.New(e.db, &rwlock.Config{Fair: fair})
		if err != nil {
			return nil, err
		}
		return leaseInstance(func(ctx context.Context, name string) (*dblock.Lease, error) {
			return l.AcquireRead(ctx, name)
		}, func() { _ = l.Close() }), nil
	}
}

// semaphoreSetup builds the semaphore cells' instance: a Locker, fair or
// not, granting 1 permit of 64.
func semaphoreSetup(fair bool) func(context.Context, *env, bool) (*instance, error) {
	return func(ctx context.Context, e *env, _ bool) (*instance, error) {
		l, err := semaphore.New(e.db, &semaphore.Config{Fair: fair})
		if err != nil {
			return nil, err
		}
		return leaseInstance(func(ctx context.Context, name string) (*dblock.Lease, error) {
			return l.Acquire(ctx, name, 64, 1)
		}, func() { _ = l.Close() }), nil
	}
}

// leaseInstance is an instance whose workers take leases through acquire.
func leaseInstance(acquire func(ctx context.Context, name string) (*dblock.Lease, error), closeFn func()) *instance {
	return &instance{
		worker: func(context.Context, int) (*worker, error) { return leaseWorker(acquire), nil },
		close:  closeFn,
	}
}

// leaseWorker is a worker taking leases through acquire.
func leaseWorker(acquire func(ctx context.Context, name string) (*dblock.Lease, error)) *worker {
	return &worker{
		acquire: func(ctx context.Context, name string) (releaseFunc, error) {
			lease, err := acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return lease.Release, nil
		},
		close: func() {},
	}
}

// readersCheck is the cells of sharedReaders goroutines reading one name
// with the Locker's owner (so the reads are one owner's re-entries of one
// share) and with an owner per goroutine (readOwners), as readers in
// separate processes are, then as many reading a name each. The three run
// in one group, round-robin, so the bar compares cells measured in the same
// spells of the machine (the uncontended table's cell of 32 readers ran
// minutes earlier).
func readersCheck(e *env, newCell func(*scenario, int) *cell, only map[string]bool) []*cell {
	sc := registry[keyRead]
	if sc == nil || only != nil && !only[keyRead] {
		return nil
	}
	name := e.prefix + "/readers/one"
	var cells []*cell
	for _, s := range []*scenario{sc, readOwners} {
		c := newCell(s, sharedReaders)
		c.nameOf = func(int, int) string { return name } // Not contended: readers hold together.
		cells = append(cells, c)
	}
	spread := newCell(sc, sharedReaders)
	spread.nameOf = func(g, _ int) string { return fmt.Sprintf("%s/readers/each/%d", e.prefix, g) }
	return append(cells, spread)
}

// readOwners is the read pair with an owner per goroutine (dblock.WithOwner),
// run only in the readers-on-one-name check.
var readOwners = &scenario{
	key: "read-owners", title: "dblock rwlock AcquireRead+Release, an owner per goroutine",
	resetTables: []string{"dblock_shares"}, shared: true,
	setup: func(ctx context.Context, e *env, _ bool) (*instance, error) {
		l, err := rwlock.New(e.db, nil)
		if err != nil {
			return nil, err
		}
		return &instance{
			worker: func(_ context.Context, g int) (*worker, error) {
				owner := dblock.WithOwner(fmt.Sprintf("%s/reader-%d", e.prefix, g))
				return leaseWorker(func(ctx context.Context, name string) (*dblock.Lease, error) {
					return l.AcquireRead(ctx, name, owner)
				}), nil
			},
			close: func() { _ = l.Close() },
		}, nil
	},
}

// printSharedBars prints the shared locks' bars: a read pair vs an
// optimistic pair at 1 goroutine, and 32 readers on one name vs 32 on a
// name each.
func printSharedBars(w io.Writer, un, readers []*cell, ps []*pairedCell) {
	barAt1(w, ps, un, keyRead, keyOptAcquire, 0.9, "read vs optimistic",
		"rwlock AcquireRead+Release, 1 goroutine: %.3f× optimistic Acquire+Release (bar ≥ 0.9×)")
	var one, owners, spread *cell
	if len(readers) == 3 {
		one, owners, spread = readers[0], readers[1], readers[2]
	}
	barVs(w, owners, spread, 0.8, "32 readers on one name vs on 32 names",
		fmt.Sprintf("rwlock: %d readers (an owner each) on one name: %%.3f× %d readers on a name each (bar ≥ 0.8×)", sharedReaders, sharedReaders))
	if usable(one) && usable(spread) {
		fmt.Fprintf(w, "- (no bar) — rwlock: %d goroutines of one Locker on one name (one owner re-entering one share): %.3f× %d readers on a name each\n",
			sharedReaders, ratioTo(one, spread), sharedReaders)
	}
}

// printReaders prints the readers-on-one-name cells beside their
// comparison (readersCheck's three cells).
func printReaders(w io.Writer, readers []*cell) {
	if len(readers) != 3 {
		return
	}
	fmt.Fprintf(w, "### Readers: %d goroutines reading one name vs a name each (run together, round-robin)\n\n", sharedReaders)
	fmt.Fprintln(w, "| cell | ops/s | p50 | p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	labels := []string{"one name, one owner", "one name, an owner each", "a name each"}
	for i, c := range readers {
		label := labels[i]
		if s := status(c); s != "" {
			fmt.Fprintf(w, "| %s | %s | | |\n", label, s)
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s |\n", label, c.opsPerSec(), fmtDur(pct(c.lat, .5)), fmtDur(pct(c.lat, .99)))
	}
	fmt.Fprintln(w)
}
