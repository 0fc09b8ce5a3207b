package locktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

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
	// A TTL of 2 s: a renewal every 667 ms, so that the lease is lost only
	// if renewals stall for 2 s (a 1 s TTL was lost on SQLite under the
	// whole suite's load with -race on 2 cores).
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(2*time.Second))
	d0, _ := lease.Deadline()
	// Hold for several TTLs: the watchdog must keep the lease.
	time.Sleep(5 * time.Second)
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

func checkLostSignal(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("lost")
	// A TTL of 2 s: the renewal that finds the row freed (every 667 ms)
	// classifies the loss before the local deadline unless renewals stall
	// for over a second (a 600 ms TTL ran past it on SQLite under the
	// history suite's load with -race, and the loss read as an expiry).
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(2*time.Second))
	s.env.ForceRelease(t, ctx, name)
	waitDone(t, lease)
	if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
		t.Fatalf("Err after a force release: %v, want ErrLost and ErrForceReleased", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Release after loss: %v, want ErrLost", err)
	}
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

func checkTakenOver(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("takenover")
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(900*time.Millisecond))
	// Another owner takes the row over behind the holder's back (as after a
	// stall past its lease): a new owner and a newer token, unexpired.
	s.env.TakeOver(t, ctx, name, "intruder")
	waitDone(t, lease)
	if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrTakenOver) {
		t.Fatalf("Err after a takeover: %v, want ErrLost and ErrTakenOver", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrTakenOver) {
		t.Fatalf("Release after a takeover: %v, want ErrLost and ErrTakenOver", err)
	}
	if owner := s.env.HolderOwner(t, ctx, name); owner != "intruder" {
		t.Fatalf("row after the old holder's Release: owner %q, want the new owner's, untouched", owner)
	}
}

// blockRow makes another transaction hold name's row (on SQLite, the
// database's write lock), so that writes to it wait; unblock ends it.
func blockRow(t *testing.T, s *suite, ctx context.Context, name string) (unblock func()) {
	t.Helper()
	iso := s.sql.iso
	tx, err := iso.Store().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin blocker: %v", err)
	}
	if iso.Kind != store.SQLite { // BEGIN IMMEDIATE already holds the write lock.
		var got string
		if err := tx.QueryRowxContext(ctx, "SELECT name FROM dblock_locks WHERE name = "+ph(iso.Kind, 1)+" FOR UPDATE", name).Scan(&got); err != nil {
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
	l, other, ctx := s.locker(), s.otherLocker(), s.ctx()
	const ttl = 400 * time.Millisecond
	// The release statement waits behind another transaction for longer
	// than the lease. Renewal stops the instant Release begins, so nothing
	// renews the lease meanwhile, and nothing declares it lost either: the
	// release, once through, frees the row and reports success. (The wait
	// stays under every dialect's lock wait, MySQL's 1 s being the
	// shortest, so that one release attempt spans it.)
	name, lease, unblock := blockedLease(t, s, l, ctx, ttl)
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

// blockedLease acquires a lease of ttl on a new name and blocks its row
// (blockRow) within half the TTL, so that a Release called next begins
// well before the lease's deadline: a set-up slower than that (a machine
// busy with other tests) is undone and tried again, five times at most.
func blockedLease(t *testing.T, s *suite, l dblock.Locker, ctx context.Context, ttl time.Duration) (string, *dblock.Lease, func()) {
	t.Helper()
	for round := 1; ; round++ {
		name := RandomName("renewstop")
		start := time.Now()
		lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(ttl))
		unblock := blockRow(t, s, ctx, name)
		took := time.Since(start)
		if took < ttl/2 || round == 5 {
			return name, lease, unblock
		}
		t.Logf("the set-up took %v of the lease's %v: again", took, ttl)
		unblock()
		undoSlowSetUp(t, lease)
	}
}

// undoSlowSetUp releases a lease whose set-up was too slow. The blocked row
// kept its renewal out meanwhile, so it may have expired already: a loss is
// what such a set-up leaves, and the row is free for the next name anyway.
func undoSlowSetUp(t *testing.T, lease *dblock.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil && !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("release %q after a slow set-up: %v", lease.Name(), err)
	}
}

func checkStrangerRelease(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("stranger")
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
		if ok, err := s.env.ReleaseAs(ctx, name, c.owner, c.token); err != nil || ok {
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
	if ok, err := s.env.ReleaseAs(ctx, name, owner, old); err != nil || ok {
		t.Fatalf("release with the owner's previous token: released %v (%v), want refused", ok, err)
	}
	wantHeld(t, other, ctx, name)
	release(t, again)
	wantFree(t, other, ctx, name)
}

// busy keeps tx running a statement for d (on SQLite, which has no idle
// bound, it just waits).
func busy(ctx context.Context, kind store.Kind, tx *sqlx.Tx, d time.Duration) error {
	switch kind {
	case store.Postgres:
		_, err := tx.ExecContext(ctx, "SELECT pg_sleep($1)", d.Seconds())
		return err
	case store.MySQL:
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
	tx, err := s.sql.iso.Store().BeginTxx(ctx, nil)
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
	go func() { busyDone <- busy(ctx, s.sql.iso.Kind, tx, ttl+1500*time.Millisecond) }()
	s.env.WaitExpired(t, ctx, name)
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
	l := s.env.Locker(t, false)
	const ttl = time.Minute
	lease := mustAcquire(t, l, ctx, name, dblock.WithTTL(ttl))
	s.env.ForceRelease(t, ctx, name)
	tx, err := s.sql.iso.Store().BeginTxx(ctx, nil)
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
		s.env.Reap(t, ctx, name)
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
	if err := iso.Store().GetContext(ctx, &n, q); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
