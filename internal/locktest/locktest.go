package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// Factory builds the Locker under test on iso (use iso.DB).
type Factory func(t *testing.T, iso *dbtest.Isolated) dblock.Locker

// Caps say what the mode under test promises beyond the common contract.
type Caps struct {
	Lease     bool // Leases expire by TTL (optimistic, fair); false for pessimistic (transaction-held).
	Reentrant bool // The same owner re-enters.
	Fencing   bool // Tokens strictly increase per name (the suite always passes WithToken()).
	// Guard, when set, runs the mode's Guard on l: a check, inside the
	// caller's transaction tx, that lease still holds, kept so until tx
	// ends (optimistic.Locker.Guard). Nil skips the Guard checks.
	Guard func(ctx context.Context, l dblock.Locker, tx *sqlx.Tx, lease *dblock.Lease) error
}

// hangGuard bounds every wait of the suite. It is a guard against hangs, not
// a timing assertion: a conforming mode finishes far sooner.
const hangGuard = 2 * time.Minute

// Run runs every check as a parallel subtest on every dialect.
func Run(t *testing.T, newLocker Factory, caps Caps) {
	t.Helper()
	RunOn(t, nil, newLocker, caps)
}

// RunOn runs every check as a parallel subtest on a database from newIso,
// one per check (a PostgreSQL behind a pooler, say); nil means every
// dialect's test database, as Run does.
func RunOn(t *testing.T, newIso func(t *testing.T) *dbtest.Isolated, newLocker Factory, caps Caps) {
	t.Helper()
	runChecks(t, caps, true, func(t *testing.T, c check) {
		run := func(t *testing.T, iso *dbtest.Isolated) {
			env := &sqlEnv{iso: iso, factory: newLocker}
			// Registered first, so it runs after every Locker of the
			// check on this pool is closed.
			noConnsInUse(t, iso.Store(), "the test database's pool")
			c.fn(t, &suite{t: t, env: env, sql: env, caps: caps})
		}
		if newIso != nil {
			run(t, newIso(t))
			return
		}
		dbtest.ForEach(t, run)
	})
}

// check is one property of the suite.
type check struct {
	name string
	fn   func(t *testing.T, s *suite)
	only bool
}

// runChecks runs each check caps (and, with sql, the database) allows as
// a parallel subtest.
func runChecks(t *testing.T, caps Caps, sql bool, run func(t *testing.T, c check)) {
	t.Helper()
	checks := []check{
		{"Exclusion", checkExclusion, true},
		{"Reentrancy", checkReentrancy, caps.Reentrant},
		{"NotReentrantByAccident", checkNotReentrantByAccident, true},
		{"ExpiryAndTakeover", checkExpiryAndTakeover, caps.Lease},
		{"TakenOver", checkTakenOver, caps.Lease},
		{"RenewalKeepsLease", checkRenewal, caps.Lease},
		{"RenewalStopsOnRelease", checkRenewalStopsOnRelease, caps.Lease && sql},
		{"TryAcquire", checkTryAcquire, true},
		{"OwnerOnlyRelease", checkOwnerOnlyRelease, true},
		{"StrangerRelease", checkStrangerRelease, caps.Lease},
		{"LostSignal", checkLostSignal, caps.Lease},
		{"GuardUntilCommit", checkGuardUntilCommit, caps.Lease && caps.Guard != nil && sql},
		{"Fencing", checkFencing, caps.Fencing},
		{"FencingAcrossReaper", checkFencingAcrossReaper, caps.Fencing},
		{"CancelWhileWaiting", checkCancelWhileWaiting, true},
		{"WaitOption", checkWaitOption, true},
		{"BadInput", checkBadInput, true},
		{"ReleaseTwice", checkReleaseTwice, true},
		{"Do", checkDo, true},
		{"DoPanics", checkDoPanics, true},
		{"DoCancelsOnLoss", checkDoCancelsOnLoss, caps.Lease},
		{"Close", checkClose, true},
		{"CloseAfterGuardLoss", checkCloseAfterGuardLoss, caps.Lease && caps.Guard != nil && sql},
	}
	for _, c := range checks {
		if !c.only {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run(t, c)
		})
	}
}

// LeakOptions are the goleak options for a mode's TestMain: they ignore the
// database drivers' and the test databases' own background goroutines.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionCleaner"),
		goleak.IgnoreAnyFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/ctxwatch.(*ContextWatcher).Watch.func1"),
		goleak.IgnoreAnyFunction("modernc.org/sqlite.newConn"),
	}
}

type suite struct {
	t    *testing.T
	env  Env
	sql  *sqlEnv // the database behind env, for the checks that need one; nil otherwise
	caps Caps
}

// locker returns a new Locker on the suite's store, closed at the end of the check.
func (s *suite) locker() dblock.Locker {
	s.t.Helper()
	return s.closed(s.env.Locker(s.t, false))
}

// otherLocker returns a Locker as another process would have, on the same
// store, closed at the end of the check.
func (s *suite) otherLocker() dblock.Locker {
	s.t.Helper()
	return s.closed(s.env.Locker(s.t, true))
}

// closed closes l at the end of the check (again, if the check closed it).
func (s *suite) closed(l dblock.Locker) dblock.Locker {
	s.t.Cleanup(func() {
		if err := l.Close(); err != nil {
			s.t.Errorf("close: %v", err)
		}
	})
	return l
}

// noConnsInUse fails t, at cleanup, if db has connections in use (a leak:
// every Locker on db is closed by then).
func noConnsInUse(t *testing.T, db *store.DB, what string) {
	t.Helper()
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections of %s in use after every Locker on it was closed", n, what)
		}
	})
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	s.t.Cleanup(cancel)
	return ctx
}

// opts adds WithToken, which lease modes ignore and pessimistic needs for tokens.
func opts(o ...dblock.Option) []dblock.Option {
	return append([]dblock.Option{dblock.WithToken()}, o...)
}

// RandomName returns a fresh lock name for one test.
func RandomName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

func mustAcquire(t *testing.T, l dblock.Locker, ctx context.Context, name string, o ...dblock.Option) *dblock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, opts(o...)...)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	if lease == nil {
		t.Fatalf("acquire %q: nil lease and nil error", name)
	}
	return lease
}

func release(t *testing.T, lease *dblock.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("release %q: %v", lease.Name(), err)
	}
}

// wantHeld asserts that another owner cannot take name right now.
func wantHeld(t *testing.T, l dblock.Locker, ctx context.Context, name string) {
	t.Helper()
	lease, err := l.TryAcquire(ctx, name, opts()...)
	if err == nil {
		_ = lease.Release(context.WithoutCancel(ctx))
		t.Fatalf("TryAcquire %q by another owner succeeded while the name was held", name)
	}
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("TryAcquire %q: %v, want ErrNotAcquired", name, err)
	}
}

// wantFree asserts that another owner can take name right now (and releases it).
func wantFree(t *testing.T, l dblock.Locker, ctx context.Context, name string) {
	t.Helper()
	lease, err := l.TryAcquire(ctx, name, opts()...)
	for try := 2; errors.Is(err, dblock.ErrUnavailable) && try <= 5; try++ {
		// Says nothing about the name (a connection not made within a
		// try's bound on a busy machine): try again.
		t.Logf("TryAcquire %q: %v; try %d", name, err, try)
		time.Sleep(100 * time.Millisecond)
		lease, err = l.TryAcquire(ctx, name, opts()...)
	}
	if err != nil {
		t.Fatalf("TryAcquire %q: %v, want the name free", name, err)
	}
	release(t, lease)
}

// waitDone waits for lease.Done, failing after the hang guard.
func waitDone(t *testing.T, lease *dblock.Lease) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(hangGuard):
		t.Fatalf("lease %q: Done not closed", lease.Name())
	}
}
