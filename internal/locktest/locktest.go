// Package locktest is the conformance suite every lock mode must pass, on
// every dialect: mutual exclusion, reentrancy, expiry and takeover (by
// expiry and by another owner's write), TryAcquire, owner-only release (also
// by a stranger's release statement), the lost signal, renewal stopping when
// Release begins, Guard (for modes that have one), fencing monotonicity (also
// across the reaper's deletions), cancellation while waiting, bad input,
// Release twice, Do (also when fn panics), Close (ending held leases as lost,
// also under a running Do) and leaks (goroutines, and the connections of
// every pool) after Close. RunProcesses adds a multi-process stress test.
//
// A mode's test package calls Run with a Factory that builds its Locker on
// iso.DB (the suite checks that pool for open connections after Close), and
// calls WorkerMain first thing in TestMain, then goleak.VerifyTestMain with
// LeakOptions:
//
//	func TestMain(m *testing.M) {
//		locktest.WorkerMain(func(db *dialect.DB) dblock.Locker { ... })
//		goleak.VerifyTestMain(m, locktest.LeakOptions()...)
//	}
//
// The suite closes every Locker the Factory returns (once, at the end of the
// check); a Factory must not close it itself.
package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
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
	checks := []struct {
		name string
		fn   func(t *testing.T, s *suite)
		only bool
	}{
		{"Exclusion", checkExclusion, true},
		{"Reentrancy", checkReentrancy, caps.Reentrant},
		{"NotReentrantByAccident", checkNotReentrantByAccident, true},
		{"ExpiryAndTakeover", checkExpiryAndTakeover, caps.Lease},
		{"TakenOver", checkTakenOver, caps.Lease},
		{"RenewalKeepsLease", checkRenewal, caps.Lease},
		{"RenewalStopsOnRelease", checkRenewalStopsOnRelease, caps.Lease},
		{"TryAcquire", checkTryAcquire, true},
		{"OwnerOnlyRelease", checkOwnerOnlyRelease, true},
		{"StrangerRelease", checkStrangerRelease, caps.Lease},
		{"LostSignal", checkLostSignal, caps.Lease},
		{"GuardUntilCommit", checkGuardUntilCommit, caps.Lease && caps.Guard != nil},
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
		{"CloseAfterGuardLoss", checkCloseAfterGuardLoss, caps.Lease && caps.Guard != nil},
	}
	for _, c := range checks {
		if !c.only {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run := func(t *testing.T, iso *dbtest.Isolated) {
				s := &suite{t: t, iso: iso, factory: newLocker, caps: caps}
				// Registered first, so it runs after every Locker of the
				// check on this pool is closed.
				noConnsInUse(t, iso.DB, "the test database's pool")
				c.fn(t, s)
			}
			if newIso != nil {
				run(t, newIso(t))
				return
			}
			dbtest.ForEach(t, run)
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
	t       *testing.T
	iso     *dbtest.Isolated
	factory Factory
	caps    Caps
}

// locker returns a new Locker on the suite's database, closed at the end of the check.
func (s *suite) locker() dblock.Locker {
	s.t.Helper()
	l := s.factory(s.t, s.iso)
	s.t.Cleanup(func() {
		if err := l.Close(); err != nil {
			s.t.Errorf("close: %v", err)
		}
	})
	return l
}

// noConnsInUse fails t, at cleanup, if db has connections in use (a leak:
// every Locker on db is closed by then).
func noConnsInUse(t *testing.T, db *dialect.DB, what string) {
	t.Helper()
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections of %s in use after every Locker on it was closed", n, what)
		}
	})
}

// otherLocker returns a Locker on a second pool to the same database, as
// another process would have.
func (s *suite) otherLocker() dblock.Locker {
	s.t.Helper()
	iso2 := &dbtest.Isolated{Kind: s.iso.Kind, DSN: s.iso.DSN, DB: s.iso.Open(s.t)}
	noConnsInUse(s.t, iso2.DB, "the other Locker's pool")
	l := s.factory(s.t, iso2)
	s.t.Cleanup(func() {
		if err := l.Close(); err != nil {
			s.t.Errorf("close other: %v", err)
		}
	})
	return l
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

func checkExclusion(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("excl")
	const goroutines, rounds = 50, 2
	var inside, maxInside atomic.Int32
	var mu sync.Mutex
	var tokens []dblock.Token
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				lease, err := l.Acquire(ctx, name, opts()...)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("acquire/release: %v", err)
	}
	if m := maxInside.Load(); m != 1 {
		t.Fatalf("%d holders at once, want 1", m)
	}
	if len(tokens) != goroutines*rounds {
		t.Fatalf("%d acquisitions, want %d", len(tokens), goroutines*rounds)
	}
	if s.caps.Fencing {
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d after %d: tokens must increase in acquisition order", tokens[i], tokens[i-1])
			}
		}
	}
}

func checkReentrancy(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("reent")
	owner := dblock.NewOwner()
	l1 := mustAcquire(t, l, ctx, name, dblock.WithOwner(owner))
	l2, err := l.TryAcquire(ctx, name, opts(dblock.WithOwner(owner))...)
	if err != nil {
		t.Fatalf("re-enter with the same owner: %v", err)
	}
	if s.caps.Fencing && l2.Token() != l1.Token() {
		t.Errorf("reentrant token %d, want the holding token %d", l2.Token(), l1.Token())
	}
	// The same owner from another process (another pool) re-enters too.
	l3 := mustAcquire(t, other, ctx, name, dblock.WithOwner(owner))
	release(t, l3)
	release(t, l1)
	wantHeld(t, other, ctx, name)
	release(t, l2)
	wantFree(t, other, ctx, name)
	// The context owner re-enters as well.
	octx := dblock.ContextWithOwner(ctx, dblock.NewOwner())
	c1 := mustAcquire(t, l, octx, name)
	c2, err := l.TryAcquire(octx, name, opts()...)
	if err != nil {
		t.Fatalf("re-enter with the context's owner: %v", err)
	}
	release(t, c2)
	wantHeld(t, other, ctx, name)
	release(t, c1)
	wantFree(t, other, ctx, name)
}

func checkNotReentrantByAccident(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("accident")
	lease := mustAcquire(t, l, ctx, name)
	wantHeld(t, l, ctx, name) // Same Locker, same goroutine, no owner named: a fresh owner.
	release(t, lease)
}

func checkExpiryAndTakeover(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("expiry")
	old := mustAcquire(t, l, ctx, name, dblock.WithTTL(300*time.Millisecond), dblock.WithMaxHold(300*time.Millisecond))
	if _, ok := old.Deadline(); !ok {
		t.Errorf("lease without a deadline")
	}
	waitDone(t, old)
	if err := old.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
		t.Fatalf("Err after expiry: %v, want ErrLost and ErrExpired", err)
	}
	next := mustAcquire(t, other, ctx, name)
	if s.caps.Fencing && next.Token() <= old.Token() {
		t.Errorf("token after takeover %d, want > %d", next.Token(), old.Token())
	}
	if err := old.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Release of the expired lease: %v, want ErrLost", err)
	}
	wantHeld(t, l, ctx, name) // The old holder's release freed nothing.
	if err := next.Err(); err != nil {
		t.Fatalf("new holder's lease: %v", err)
	}
	release(t, next)
}

func checkRenewal(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("renew")
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(time.Second))
	d0, _ := lease.Deadline()
	// Hold for several TTLs: the watchdog must keep the lease.
	time.Sleep(2500 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("renewed lease lost: %v", err)
	}
	if d1, _ := lease.Deadline(); !d1.After(d0) {
		t.Errorf("deadline %v not moved past %v by renewals", d1, d0)
	}
	wantHeld(t, other, ctx, name)
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkTryAcquire(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("try")
	lease := mustAcquire(t, l, ctx, name)
	// The holder keeps the name for as long as TryAcquire runs, so a
	// TryAcquire that waited would never return.
	_, err := other.TryAcquire(ctx, name, opts()...)
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v, want ErrNotAcquired", err)
	}
	var held *dblock.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire error %v carries no *dblock.HeldError", err)
	}
	if held.Name != name {
		t.Errorf("HeldError.Name %q, want %q", held.Name, name)
	}
	if s.caps.Lease && held.Owner != lease.Owner() {
		t.Errorf("HeldError.Owner %q, want the holder %q", held.Owner, lease.Owner())
	}
	// WithWait(0) on Acquire tries once as well.
	if _, err := other.Acquire(ctx, name, opts(dblock.WithWait(0))...); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("Acquire WithWait(0) of a held name: %v, want ErrNotAcquired", err)
	}
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkOwnerOnlyRelease(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("owner")
	lease := mustAcquire(t, l, ctx, name, dblock.WithOwner("owner-a"))
	// Another owner's acquisitions and releases leave the holder alone.
	for i := 0; i < 3; i++ {
		if b, err := other.TryAcquire(ctx, name, opts(dblock.WithOwner("owner-b"))...); err == nil {
			_ = b.Release(ctx)
			t.Fatalf("owner-b acquired a name owner-a holds")
		}
	}
	b := mustAcquire(t, other, ctx, RandomName("owner-other"), dblock.WithOwner("owner-b"))
	release(t, b)
	if err := lease.Err(); err != nil {
		t.Fatalf("owner-a's lease: %v", err)
	}
	wantHeld(t, other, ctx, name)
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkLostSignal(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("lost")
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(600*time.Millisecond))
	if ok, err := s.iso.DB.ForceRelease(ctx, nil, name); err != nil || !ok {
		t.Fatalf("force release: %v %v", ok, err)
	}
	waitDone(t, lease)
	if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
		t.Fatalf("Err after a force release: %v, want ErrLost and ErrForceReleased", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Release after loss: %v, want ErrLost", err)
	}
}

func checkFencing(t *testing.T, s *suite) {
	lockers := []dblock.Locker{s.locker(), s.otherLocker()}
	ctx, name := s.ctx(), RandomName("fence")
	var last dblock.Token
	for i := 0; i < 20; i++ {
		lease := mustAcquire(t, lockers[i%2], ctx, name)
		if lease.Token() <= last {
			t.Fatalf("acquisition %d: token %d, want > %d", i, lease.Token(), last)
		}
		last = lease.Token()
		release(t, lease)
	}
}

// call runs f in a goroutine and fails if it does not return within the hang guard.
func call[T any](t *testing.T, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("call did not return")
		panic("unreachable")
	}
}

func checkCancelWhileWaiting(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("cancel")
	lease := mustAcquire(t, l, ctx, name)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := call(t, func() error { _, err := other.Acquire(dctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until a deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}

	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	err = call(t, func() error { _, err := other.Acquire(cctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire until cancelled: %v, want ErrNotAcquired and context.Canceled", err)
	}

	// Already cancelled: no wait at all.
	err = call(t, func() error { _, err := other.Acquire(cctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v, want ErrNotAcquired and context.Canceled", err)
	}

	// The waiters left nothing behind.
	if n := countRows(t, s.iso, "dblock_waiters", ""); n != 0 {
		t.Errorf("%d waiter rows left after cancelled waits", n)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("holder's lease: %v", err)
	}
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkWaitOption(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("wait")
	lease := mustAcquire(t, l, ctx, name)
	err := call(t, func() error {
		_, err := other.Acquire(ctx, name, opts(dblock.WithWait(150*time.Millisecond))...)
		return err
	})
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("Acquire WithWait on a held name: %v, want ErrNotAcquired", err)
	}
	// A waiter succeeds once the holder releases.
	got := make(chan error, 1)
	go func() {
		w, err := other.Acquire(ctx, name, opts(dblock.WithWait(hangGuard))...)
		if err == nil {
			err = w.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	release(t, lease)
	if err := call(t, func() error { return <-got }); err != nil {
		t.Fatalf("waiter after release: %v", err)
	}
	if n := countRows(t, s.iso, "dblock_waiters", ""); n != 0 {
		t.Errorf("%d waiter rows left", n)
	}
}

func checkBadInput(t *testing.T, s *suite) {
	l, ctx := s.locker(), s.ctx()
	badNames := map[string]string{
		"empty":    "",
		"256bytes": strings.Repeat("n", 256),
		"utf8":     "bad\xffname",
		"nul":      "a\x00b",
	}
	for label, name := range badNames {
		if _, err := l.TryAcquire(ctx, name, opts()...); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("TryAcquire(%s): %v, want ErrInvalidName", label, err)
		}
		if _, err := l.Acquire(ctx, name, opts()...); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("Acquire(%s): %v, want ErrInvalidName", label, err)
		}
		ran := false
		if err := l.Do(ctx, name, func(context.Context) error { ran = true; return nil }, opts()...); !errors.Is(err, dblock.ErrInvalidName) || ran {
			t.Errorf("Do(%s): %v (fn ran: %v), want ErrInvalidName and fn not run", label, err, ran)
		}
	}
	// 255 bytes is the longest valid name.
	lease := mustAcquire(t, l, ctx, strings.Repeat("n", 255))
	release(t, lease)
	badOpts := map[string]dblock.Option{
		"ttl0":        dblock.WithTTL(0),
		"ttlNegative": dblock.WithTTL(-time.Second),
		"ttlTooShort": dblock.WithTTL(time.Microsecond),
		"ownerUTF8":   dblock.WithOwner("bad\xffowner"),
		"ownerNUL":    dblock.WithOwner("a\x00b"),
		"ownerLong":   dblock.WithOwner(strings.Repeat("o", 256)),
		"waitNeg":     dblock.WithWait(-time.Second),
	}
	for label, o := range badOpts {
		name := RandomName("bad-" + label)
		if _, err := l.TryAcquire(ctx, name, opts(o)...); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("TryAcquire with %s: %v, want ErrInvalidOption", label, err)
		}
		if _, err := l.Acquire(ctx, name, opts(o)...); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("Acquire with %s: %v, want ErrInvalidOption", label, err)
		}
	}
	// Nothing was written for any refused call (the one valid name's row aside).
	if n := countRows(t, s.iso, "dblock_locks", ""); n > 1 {
		t.Errorf("%d rows in dblock_locks after refused calls, want at most the valid name's", n)
	}
	if n := countRows(t, s.iso, "dblock_locks", "owner IS NOT NULL"); n != 0 {
		t.Errorf("%d held rows after refused calls", n)
	}
	if n := countRows(t, s.iso, "dblock_waiters", ""); n != 0 {
		t.Errorf("%d rows in dblock_waiters after refused calls", n)
	}
}

func checkReleaseTwice(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("twice")
	lease := mustAcquire(t, l, ctx, name)
	release(t, lease)
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("second Release: %v, want ErrReleased", err)
	}
	if err := lease.Err(); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatalf("Done not closed after Release")
	}
}

func checkDo(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("do")
	sentinel := errors.New("fn failed")
	err := l.Do(ctx, name, func(fctx context.Context) error {
		wantHeld(t, other, ctx, name)
		return sentinel
	}, opts()...)
	if !errors.Is(err, sentinel) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	wantFree(t, other, ctx, name)
	ran := false
	if err := l.Do(ctx, name, func(context.Context) error { ran = true; return nil }, opts()...); err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	wantFree(t, other, ctx, name)
}

func checkDoCancelsOnLoss(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("doloss")
	var cause error
	err := l.Do(ctx, name, func(fctx context.Context) error {
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
			return fctx.Err()
		case <-time.After(hangGuard):
			return errors.New("fn's context was not cancelled")
		}
	}, opts(dblock.WithTTL(300*time.Millisecond), dblock.WithMaxHold(300*time.Millisecond))...)
	if !errors.Is(cause, dblock.ErrLost) || !errors.Is(cause, dblock.ErrExpired) {
		t.Fatalf("fn's context cause: %v, want ErrLost and ErrExpired", cause)
	}
	if !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Do after loss: %v, want ErrLost", err)
	}
}

func checkClose(t *testing.T, s *suite) {
	ctx := s.ctx()
	l := s.factory(t, s.iso)
	other := s.otherLocker()
	a, b, busy := RandomName("close-a"), RandomName("close-b"), RandomName("close-busy")
	la := mustAcquire(t, l, ctx, a)
	lb := mustAcquire(t, l, ctx, b, dblock.WithTTL(time.Minute))
	released := mustAcquire(t, l, ctx, RandomName("close-released"))
	release(t, released)
	holder := mustAcquire(t, other, ctx, busy)
	waiter := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, busy, opts()...)
		waiter <- err
	}()
	// A Do whose fn runs while Close runs: Close must tell fn (cancel its
	// context) that the lock is gone, not free the name under it silently.
	doName := RandomName("close-do")
	fnRunning := make(chan struct{})
	fnCause := make(chan error, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- l.Do(ctx, doName, func(fctx context.Context) error {
			close(fnRunning)
			select {
			case <-fctx.Done():
				fnCause <- context.Cause(fctx)
				return fctx.Err()
			case <-time.After(hangGuard):
				fnCause <- nil
				return errors.New("fn's context was not cancelled by Close")
			}
		}, opts()...)
	}()
	select {
	case <-fnRunning:
	case err := <-doErr:
		t.Fatalf("Do returned before fn ran: %v", err)
	case <-time.After(hangGuard):
		t.Fatalf("Do's fn did not start")
	}
	time.Sleep(100 * time.Millisecond)
	if err := call(t, l.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := call(t, func() error { return <-waiter }); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("waiter ended by Close: %v, want ErrNotAcquired", err)
	}
	if cause := call(t, func() error { return <-fnCause }); !errors.Is(cause, dblock.ErrLost) {
		t.Fatalf("cause of the cancellation of a Do's fn by Close: %v, want ErrLost", cause)
	}
	if err := call(t, func() error { return <-doErr }); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Do ended by Close: %v, want ErrLost", err)
	}
	wantFree(t, other, ctx, doName)
	for _, lease := range []*dblock.Lease{la, lb} {
		select {
		case <-lease.Done():
		default:
			t.Errorf("lease %q still open after Close", lease.Name())
		}
		if err := lease.Err(); !errors.Is(err, dblock.ErrLost) {
			t.Errorf("lease %q after Close: Err %v, want ErrLost (the holder did not release it)", lease.Name(), err)
		}
	}
	wantFree(t, other, ctx, a)
	wantFree(t, other, ctx, b)
	if _, err := l.TryAcquire(ctx, RandomName("after-close"), opts()...); err == nil {
		t.Errorf("TryAcquire after Close succeeded")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := s.iso.DB.Stats().InUse; n != 0 {
		t.Errorf("%d connections in use after Close", n)
	}
	release(t, holder)
}

func checkDoPanics(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("dopanic")
	type boom struct{}
	var fnCtx context.Context
	got := func() (r any) {
		defer func() { r = recover() }()
		_ = l.Do(ctx, name, func(fctx context.Context) error {
			fnCtx = fctx
			panic(boom{})
		}, opts()...)
		return nil
	}()
	if _, ok := got.(boom); !ok {
		t.Fatalf("recovered %v from Do, want fn's panic value", got)
	}
	if fnCtx == nil || fnCtx.Err() == nil {
		t.Errorf("fn's context not cancelled after fn panicked")
	}
	// The panic did not leave the name held (nor, for a lease, renewed).
	wantFree(t, other, ctx, name)
}

// ph returns the n-th bind marker of kind.
func ph(kind dialect.Kind, n int) string {
	if kind == dialect.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

func checkTakenOver(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("takenover")
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(900*time.Millisecond))
	// Another owner takes the row over behind the holder's back (as after a
	// stall past its lease): a new owner and a newer token, unexpired.
	k := s.iso.Kind
	r, err := s.iso.DB.ExecContext(ctx, "UPDATE dblock_locks SET owner = "+ph(k, 1)+", version = version + 1 WHERE name = "+ph(k, 2)+" AND owner = "+ph(k, 3),
		"intruder", name, lease.Owner())
	if err != nil {
		t.Fatalf("take the row over: %v", err)
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("take the row over: %d rows (%v), want 1", n, err)
	}
	waitDone(t, lease)
	if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrTakenOver) {
		t.Fatalf("Err after a takeover: %v, want ErrLost and ErrTakenOver", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrTakenOver) {
		t.Fatalf("Release after a takeover: %v, want ErrLost and ErrTakenOver", err)
	}
	h, err := s.iso.DB.LeaseHolder(ctx, nil, name)
	if err != nil || h.Owner != "intruder" {
		t.Fatalf("row after the old holder's Release: owner %q (%v), want the new owner's, untouched", h.Owner, err)
	}
}

// blockRow makes another transaction hold name's row (on SQLite, the
// database's write lock), so that writes to it wait; unblock ends it.
func blockRow(t *testing.T, s *suite, ctx context.Context, name string) (unblock func()) {
	t.Helper()
	tx, err := s.iso.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin blocker: %v", err)
	}
	if s.iso.Kind != dialect.SQLite { // BEGIN IMMEDIATE already holds the write lock.
		var got string
		if err := tx.QueryRowxContext(ctx, "SELECT name FROM dblock_locks WHERE name = "+ph(s.iso.Kind, 1)+" FOR UPDATE", name).Scan(&got); err != nil {
			_ = tx.Rollback()
			t.Fatalf("lock the row: %v", err)
		}
	}
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			if err := tx.Commit(); err != nil {
				t.Errorf("end blocker: %v", err)
			}
		})
	}
	t.Cleanup(unblock)
	return unblock
}

func checkRenewalStopsOnRelease(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("renewstop")
	const ttl = 200 * time.Millisecond
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(ttl))
	// The release statement waits behind another transaction for longer
	// than the lease. Renewal stops the instant Release begins, so nothing
	// renews the lease meanwhile, and nothing declares it lost either: the
	// release, once through, frees the row and reports success. (The wait
	// stays under every dialect's lock wait, MySQL's 1 s being the
	// shortest, so that one release attempt spans it.)
	unblock := blockRow(t, s, ctx, name)
	released := make(chan error, 1)
	go func() { released <- lease.Release(context.WithoutCancel(ctx)) }()
	time.Sleep(ttl + 150*time.Millisecond)
	unblock()
	if err := call(t, func() error { return <-released }); err != nil {
		t.Fatalf("Release whose statement waited past the lease: %v, want success (no renewal or expiry after Release began)", err)
	}
	if err := lease.Err(); !errors.Is(err, dblock.ErrReleased) || errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	wantFree(t, other, ctx, name)
}

func checkStrangerRelease(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("stranger")
	db := s.iso.DB
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(time.Minute))
	// The release statement itself refuses anyone but (owner, token).
	for _, c := range []struct {
		who   string
		owner string
		token dblock.Token
	}{
		{"a stranger with the holder's token", "stranger", lease.Token()},
		{"the holder's owner with another token", lease.Owner(), lease.Token() + 1},
		{"the holder's owner with an older token", lease.Owner(), lease.Token() - 1},
	} {
		if ok, err := db.ReleaseLease(ctx, nil, name, c.owner, c.token); err != nil || ok {
			t.Fatalf("release by %s: released %v (%v), want refused", c.who, ok, err)
		}
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("holder's lease after strangers' releases: %v", err)
	}
	wantHeld(t, other, ctx, name)
	// The same owner's earlier hold (an old token) cannot release a newer one.
	owner, old := lease.Owner(), lease.Token()
	release(t, lease)
	again := mustAcquire(t, l, ctx, name, dblock.WithOwner(owner), dblock.WithTTL(time.Minute))
	if ok, err := db.ReleaseLease(ctx, nil, name, owner, old); err != nil || ok {
		t.Fatalf("release with the owner's previous token: released %v (%v), want refused", ok, err)
	}
	wantHeld(t, other, ctx, name)
	release(t, again)
	wantFree(t, other, ctx, name)
}

// waitExpired waits (bounded) until the database clock is past name's lease.
func waitExpired(t *testing.T, s *suite, ctx context.Context, name string) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); ; {
		h, err := s.iso.DB.LeaseHolder(ctx, nil, name)
		if err != nil {
			t.Fatalf("read %q: %v", name, err)
		}
		if !h.ExpiresAt.After(h.Now) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: lease not expired by the database clock", name)
		}
		time.Sleep(min(h.ExpiresAt.Sub(h.Now)+time.Millisecond, 100*time.Millisecond))
	}
}

// busy keeps tx running a statement for d (on SQLite, which has no idle
// bound, it just waits).
func busy(ctx context.Context, kind dialect.Kind, tx *sqlx.Tx, d time.Duration) error {
	switch kind {
	case dialect.Postgres:
		_, err := tx.ExecContext(ctx, "SELECT pg_sleep($1)", d.Seconds())
		return err
	case dialect.MySQL:
		_, err := tx.ExecContext(ctx, "SELECT SLEEP(?)", d.Seconds())
		return err
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func checkGuardUntilCommit(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("guard")
	const ttl = 2 * time.Second
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
	tx, err := s.iso.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := s.caps.Guard(ctx, l, tx, lease); err != nil {
		t.Fatalf("guard of a held lease: %v", err)
	}
	// The guarded transaction runs past the lease's end by the database
	// clock (running a statement: an idle one may be ended by the server at
	// the lease's end). Until it commits, nobody takes the name.
	busyDone := make(chan error, 1)
	go func() { busyDone <- busy(ctx, s.iso.Kind, tx, ttl+1500*time.Millisecond) }()
	waitExpired(t, s, ctx, name)
	wantHeld(t, other, ctx, name)
	if err := call(t, func() error { return <-busyDone }); err != nil {
		t.Fatalf("statement in the guarded transaction: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit of the guarded transaction: %v", err)
	}
	next := mustAcquire(t, other, ctx, name)
	if s.caps.Fencing && next.Token() <= lease.Token() {
		t.Errorf("token after the guarded transaction %d, want > %d", next.Token(), lease.Token())
	}
	release(t, next)
}

func checkCloseAfterGuardLoss(t *testing.T, s *suite) {
	ctx, name := s.ctx(), RandomName("guardloss")
	l := s.factory(t, s.iso)
	const ttl = time.Minute
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(ttl))
	if ok, err := s.iso.DB.ForceRelease(ctx, nil, name); err != nil || !ok {
		t.Fatalf("force release: %v %v", ok, err)
	}
	tx, err := s.iso.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	err = s.caps.Guard(ctx, l, tx, lease)
	_ = tx.Rollback()
	if !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
		t.Fatalf("guard after a force release: %v, want ErrNotHeld, ErrLost and ErrForceReleased", err)
	}
	waitDone(t, lease)
	// The lease is lost and never released: Close must not wait for its
	// watchdog to reach the lease's local deadline.
	start := time.Now()
	if err := call(t, l.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > ttl/2 {
		t.Fatalf("Close took %v with a lease lost through Guard (TTL %v): its watchdog kept running", d, ttl)
	}
}

func checkFencingAcrossReaper(t *testing.T, s *suite) {
	lockers := []dblock.Locker{s.locker(), s.otherLocker()}
	ctx, name := s.ctx(), RandomName("fence-reaped")
	var last dblock.Token
	for i := 0; i < 4; i++ {
		lease := mustAcquire(t, lockers[i%2], ctx, name)
		if lease.Token() <= last {
			t.Fatalf("acquisition %d after the reaper deleted the row: token %d, want > %d", i, lease.Token(), last)
		}
		last = lease.Token()
		release(t, lease)
		reapRow(t, s, ctx, name)
	}
}

// reapRow runs the reaper's idle-row deletion until name's row is gone.
func reapRow(t *testing.T, s *suite, ctx context.Context, name string) {
	t.Helper()
	k := s.iso.Kind
	for attempt := 0; ; attempt++ {
		if _, err := s.iso.DB.ReapIdle(ctx, dialect.ReapParams{Limit: 1000}); err != nil {
			t.Fatalf("reap idle rows: %v", err)
		}
		var n int
		if err := s.iso.DB.GetContext(ctx, &n, "SELECT count(*) FROM dblock_locks WHERE name = "+ph(k, 1), name); err != nil {
			t.Fatalf("count %q: %v", name, err)
		}
		if n == 0 {
			return
		}
		if attempt == 50 {
			t.Fatalf("the reaper did not delete the idle row of %q", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countRows counts rows of table (a fixed dblock table) matching where.
func countRows(t *testing.T, iso *dbtest.Isolated, table, where string) int {
	t.Helper()
	q := "SELECT count(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := iso.DB.GetContext(ctx, &n, q); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
