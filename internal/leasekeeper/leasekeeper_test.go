package leasekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

// hangGuard bounds every wait of these tests (a guard against hangs, not a
// timing assertion).
const hangGuard = time.Minute

// quiet keeps the keepers' warnings (expected losses) out of the test output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newKeeper(t *testing.T, cfg leasekeeper.Config) *leasekeeper.Keeper {
	t.Helper()
	cfg.Logger = quiet
	k := leasekeeper.New(cfg)
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return k
}

// start takes name in the database and hands the lease to k.
func start(t *testing.T, k *leasekeeper.Keeper, db *dialect.DB, name string, ttl time.Duration, renew bool) *dblock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	owner := dblock.NewOwner()
	reqStart := time.Now()
	res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire %q: %+v %v", name, res, err)
	}
	lease, err := k.Start(leasekeeper.Params{
		Name: name, Owner: owner, Mode: dblock.ModeOptimistic, Token: res.Token, TTL: ttl, MaxHold: maxHold(renew, ttl),
		ReqStart: reqStart, Reentry: res.Reentry,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return lease
}

// maxHold caps a lease that must not be renewed at its first TTL.
func maxHold(renew bool, ttl time.Duration) time.Duration {
	if renew {
		return 0
	}
	return ttl
}

// blockRow makes another transaction hold name's row (on SQLite, the
// database's write lock) until the returned function is called.
func blockRow(t *testing.T, iso *dbtest.Isolated, name string) func() {
	t.Helper()
	// The transaction outlives this call: database/sql rolls a transaction
	// back when its context ends.
	ctx := context.Background()
	tx, err := iso.Store().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin blocker: %v", err)
	}
	if iso.Kind != store.SQLite {
		q := "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE"
		if iso.Kind == store.Postgres {
			q = "SELECT name FROM dblock_locks WHERE name = $1 FOR UPDATE"
		}
		var got string
		if err := tx.QueryRowxContext(ctx, q, name).Scan(&got); err != nil {
			_ = tx.Rollback()
			t.Fatalf("lock the row: %v", err)
		}
	}
	var once sync.Once
	unblock := func() {
		once.Do(func() {
			if err := tx.Commit(); err != nil {
				t.Errorf("end blocker: %v", err)
			}
		})
	}
	t.Cleanup(unblock)
	return unblock
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("%s: no answer", what)
		panic("unreachable")
	}
}

// fromRenewal reports whether the calling statement is sent by the
// watchdog's renewal loop (rather than by a release or a read).
func fromRenewal() bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*held).renewLoop") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestRenewalStopsWhenReleaseBegins counts the renewal statements the
// keeper sends: once Release begins there are none, even while the release
// waits behind another transaction for several renewal intervals.
func TestRenewalStopsWhenReleaseBegins(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		var renewals, others atomic.Int64
		renewed := make(chan struct{}, 1)
		k := newKeeper(t, leasekeeper.Config{DB: iso.Store(), CountStatement: func() {
			if !fromRenewal() {
				others.Add(1)
				return
			}
			renewals.Add(1)
			select {
			case renewed <- struct{}{}:
			default:
			}
		}})
		const ttl = 3 * time.Second // Renewed every second.
		name := locktest.RandomName("renewstop")
		lease := start(t, k, iso.DB, name, ttl, true)
		d0, _ := lease.Deadline()
		// Right after a renewal went through, the next one is an interval
		// away (the count comes before the statement: wait for its answer,
		// which moves the deadline).
		receive(t, renewed, "first renewal")
		for limit := time.Now().Add(hangGuard); ; time.Sleep(time.Millisecond) {
			if d, _ := lease.Deadline(); d.After(d0) {
				break
			}
			if time.Now().After(limit) {
				t.Fatalf("the first renewal did not move the deadline")
			}
		}
		unblock := blockRow(t, iso, name)
		before := renewals.Load()
		released := make(chan error, 1)
		go func() { released <- lease.Release(context.Background()) }()
		// Two renewal intervals with the release waiting, ending well
		// before the lease does (after it, a release that had to retry
		// gives up: the lease ends by expiry).
		time.Sleep(2*ttl/3 + 200*time.Millisecond)
		unblock()
		if err := receive(t, released, "release"); err != nil {
			t.Fatalf("release: %v", err)
		}
		if n := renewals.Load() - before; n != 0 {
			t.Fatalf("%d renewals sent after Release began, want none", n)
		}
		if others.Load() == 0 {
			t.Fatalf("no release statement counted")
		}
	})
}

// TestLostStopsWatchdog: a lease that a mode finds lost in a statement of
// its own (Keeper.Lost, as Guard does) stops its watchdog at once, so
// Close does not wait for the lease's local deadline; no goroutine is left
// (TestMain checks).
func TestLostStopsWatchdog(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		k := leasekeeper.New(leasekeeper.Config{DB: iso.Store(), Logger: quiet})
		const ttl = time.Minute
		for _, renew := range []bool{false, true} {
			name := locktest.RandomName("lost")
			lease := start(t, k, iso.DB, name, ttl, renew)
			if ok, err := iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
				t.Fatalf("force release: %v %v", ok, err)
			}
			if reason := k.Lost(ctx, lease); !errors.Is(reason, dblock.ErrForceReleased) {
				t.Fatalf("Lost: %v, want ErrForceReleased", reason)
			}
			receive(t, lease.Done(), "Done after Lost")
		}
		if n := k.Held(); n != 0 {
			t.Fatalf("%d leases held after both were lost", n)
		}
		began := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- k.Close() }()
		if err := receive(t, closed, "Close"); err != nil {
			t.Fatalf("close: %v", err)
		}
		if d := time.Since(began); d > ttl/2 {
			t.Fatalf("Close took %v with leases lost through Lost (TTL %v): their watchdogs kept running", d, ttl)
		}
	})
}

// TestCloseEndsLeasesAsLost: Close ends a held lease as lost with
// dblock.ErrClosed before it frees the row, and frees it.
func TestCloseEndsLeasesAsLost(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		closedErr := dblock.ErrClosed
		var released atomic.Int32
		k := leasekeeper.New(leasekeeper.Config{DB: iso.Store(), Logger: quiet, Events: obs.NewEvents(&dblock.Hooks{
			OnReleased: func(string, string, dblock.Token, time.Duration) { released.Add(1) },
			OnLost:     func(string, string, dblock.Token, error) { t.Errorf("OnLost called for a lease ended by Close") },
		}, nil)})
		name := locktest.RandomName("close")
		lease := start(t, k, iso.DB, name, time.Minute, true)
		fnCtx, stop := lease.Context(ctx)
		defer stop()
		if err := k.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		receive(t, fnCtx.Done(), "lease context after Close")
		if cause := context.Cause(fnCtx); !errors.Is(cause, dblock.ErrLost) || !errors.Is(cause, closedErr) {
			t.Fatalf("cause: %v, want ErrLost and the Closed reason", cause)
		}
		if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, closedErr) {
			t.Fatalf("Err after Close: %v, want ErrLost and the Closed reason", err)
		}
		if released.Load() != 1 {
			t.Fatalf("OnReleased called %d times, want 1", released.Load())
		}
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil || h.Owner != "" {
			t.Fatalf("row after Close: owner %q (%v), want free", h.Owner, err)
		}
		if _, err := k.Start(leasekeeper.Params{Name: name, Owner: "o", Token: 1, TTL: time.Minute, ReqStart: time.Now()}); !errors.Is(err, dblock.ErrClosed) {
			t.Fatalf("Start after Close: %v, want ErrClosed", err)
		}
	})
}

// TestOnLostMayRelease: an OnLost hook that releases the lease (it runs on
// the watchdog, which Release waits for) does not deadlock.
func TestOnLostMayRelease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		leases := make(chan *dblock.Lease, 1)
		hookReleased := make(chan error, 1)
		k := newKeeper(t, leasekeeper.Config{DB: iso.Store(), Events: obs.NewEvents(&dblock.Hooks{
			OnLost: func(string, string, dblock.Token, error) {
				hookReleased <- (<-leases).Release(context.Background())
			},
		}, nil)})
		name := locktest.RandomName("onlost")
		lease := start(t, k, iso.DB, name, 600*time.Millisecond, true)
		leases <- lease
		if ok, err := iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		err := receive(t, hookReleased, "Release called by OnLost")
		if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
			t.Fatalf("Release in OnLost: %v, want ErrLost and ErrForceReleased", err)
		}
	})
}

// TestReleaseGivesUpStalledConnection: a release whose connection stops
// answering is given up after Config.ReleaseTimeout and tried again on
// another connection, even when Release's ctx has no deadline; the name is
// freed. (SQLite runs in process: no connection to lose.)
func TestReleaseGivesUpStalledConnection(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			dsn, p := locktest.StallProxy(t, iso)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			db, err := dialect.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open via proxy: %v", err)
			}
			defer db.Close()
			k := newKeeper(t, leasekeeper.Config{DB: store.Of(db), ReleaseTimeout: time.Second})
			name := locktest.RandomName("stalled")
			lease := start(t, k, db, name, time.Minute, false)
			p.Stall()
			released := make(chan error, 1)
			go func() { released <- lease.Release(context.Background()) }()
			if err := receive(t, released, "Release on a stalled connection"); err != nil {
				t.Fatalf("release: %v", err)
			}
			h, err := iso.Store().LeaseHolder(ctx, nil, name)
			if err != nil || h.Owner != "" {
				t.Fatalf("row after the release: owner %q (%v), want free", h.Owner, err)
			}
		})
	}
}

// TestReleaseEndsAtDeadline: a release that cannot reach the server at all
// (every connection black-holed) and whose ctx has no deadline retries until
// the lease's local deadline, then reports the lease lost by expiry (it
// ended that way) instead of retrying forever; not before that deadline,
// which the lease cannot have passed yet (a history check across a Galera
// node's death caught a release that gave up 20 ms early, when too little
// time was left for another attempt).
func TestReleaseEndsAtDeadline(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			dsn, p := locktest.StallProxy(t, iso)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			db, err := dialect.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("open via proxy: %v", err)
			}
			defer db.Close()
			// Short attempts: the last pause before the deadline is then
			// usually longer than the time left.
			k := newKeeper(t, leasekeeper.Config{DB: store.Of(db), ReleaseTimeout: 50 * time.Millisecond})
			name := locktest.RandomName("vanished")
			const ttl = 2 * time.Second
			before := time.Now() // The lease's local deadline is after before+ttl.
			lease := start(t, k, db, name, ttl, false)
			p.Blackhole()
			released := make(chan error, 1)
			go func() { released <- lease.Release(context.Background()) }()
			err = receive(t, released, "Release with the server unreachable")
			if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
				t.Fatalf("release: %v, want ErrLost and ErrExpired", err)
			}
			if early := ttl - time.Since(before); early > 0 {
				t.Fatalf("the release reported the lease expired %v before its deadline", early)
			}
		})
	}
}

// TestWatchdogStartsByTheFirstDueEvent: the watchdog starts when its first
// event is due, not with the lease. A lease capped (MaxHold) below TTL/3
// ends as lost with ErrExpired at the cap, long before a first renewal
// would be due; a renewed lease is still held after several TTLs.
func TestWatchdogStartsByTheFirstDueEvent(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		k := newKeeper(t, leasekeeper.Config{DB: iso.Store()})
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		owner := dblock.NewOwner()
		name := locktest.RandomName("capped")
		const ttl, hold = time.Minute, 300 * time.Millisecond
		reqStart := time.Now()
		res, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: hold})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		capped, err := k.Start(leasekeeper.Params{Name: name, Owner: owner, Mode: dblock.ModeOptimistic,
			Token: res.Token, TTL: ttl, MaxHold: hold, ReqStart: reqStart, Reentry: res.Reentry})
		if err != nil {
			t.Fatal(err)
		}
		receive(t, capped.Done(), "Done of a lease capped at 300 ms")
		if took := time.Since(reqStart); took > ttl/3 {
			t.Fatalf("the capped lease ended after %v, not at its cap", took)
		}
		if err := capped.Err(); !errors.Is(err, dblock.ErrExpired) {
			t.Fatalf("capped lease: %v, want ErrExpired", err)
		}

		const short = 600 * time.Millisecond
		renewed := start(t, k, iso.DB, locktest.RandomName("renewed"), short, true)
		time.Sleep(3 * short)
		if err := renewed.Err(); err != nil {
			t.Fatalf("renewed lease after %v (TTL %v): %v", 3*short, short, err)
		}
		if err := renewed.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHandlesAcrossReuse takes and releases names one after another (the
// Keeper reuses the token map a released name emptied for the next) while
// another lease stays held: every name's handles are its own, a released
// name has none (for its owner and for any), and the held one keeps its
// count throughout.
func TestHandlesAcrossReuse(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	k := newKeeper(t, leasekeeper.Config{DB: iso.Store()})
	kept := start(t, k, iso.DB, "kept", time.Minute, false)
	ctx := context.Background()
	for i := range 100 {
		name := fmt.Sprintf("cycled-%d", i%7)
		lease := start(t, k, iso.DB, name, time.Minute, false)
		if n := k.Handles(name, lease.Owner(), lease.Token()); n != 1 || !k.Holds(name, lease.Owner()) || !k.HoldsName(name) {
			t.Fatalf("round %d: %d handles of %s, want 1 (held by name: %v)", i, n, name, k.HoldsName(name))
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if k.Holds(name, lease.Owner()) || k.HoldsName(name) || len(k.HandlesOf(name, lease.Owner())) != 0 {
			t.Fatalf("round %d: %s released still has handles: %v", i, name, k.HandlesOf(name, lease.Owner()))
		}
		if got := k.HandlesOf("kept", kept.Owner()); len(got) != 1 || got[kept.Token()] != 1 {
			t.Fatalf("round %d: the held lease's handles %v, want one of token %d", i, got, kept.Token())
		}
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
