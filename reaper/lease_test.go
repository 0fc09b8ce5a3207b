package reaper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestPassesNeverOverlap runs passes concurrently on one Reaper (three
// goroutines) and on a second Reaper given the same Owner: each pass holds
// the reaper lease under an owner of its own, so no pass re-enters another's
// lease and no two ever work at once.
func TestPassesNeverOverlap(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		const passes = 25
		var (
			active, overlaps, worked, skipped atomic.Int64
			mu                                sync.Mutex
			owners                            = map[string]bool{}
		)
		hooks := &Hooks{
			OnPassStart: func(dblock.Token) {
				if active.Add(1) != 1 {
					overlaps.Add(1)
				}
				// Give the others time to try while this pass works.
				time.Sleep(time.Millisecond)
			},
			OnPass: func(st Stats, _ error) {
				if st.Worked {
					active.Add(-1)
				}
				mu.Lock()
				owners[st.Owner] = true
				mu.Unlock()
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared := newReaper(t, iso.Open(t), &Config{Owner: "replica", Hooks: hooks})
		twin := newReaper(t, iso.Open(t), &Config{Owner: "replica", Hooks: hooks})
		var wg sync.WaitGroup
		errs := make(chan error, 4*passes)
		for _, r := range []*Reaper{shared, shared, shared, twin} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := 0; p < passes; p++ {
					st, err := r.RunOnce(ctx)
					if err != nil {
						errs <- err
						return
					}
					if st.Worked {
						worked.Add(1)
					}
					if st.Skipped {
						skipped.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("pass: %v", err)
		}
		t.Logf("%s: %d passes worked, %d skipped, %d distinct owners", iso.Kind, worked.Load(), skipped.Load(), len(owners))
		if overlaps.Load() != 0 {
			t.Fatalf("%d passes worked while another was working", overlaps.Load())
		}
		if worked.Load()+skipped.Load() != 4*passes || worked.Load() == 0 || skipped.Load() == 0 {
			t.Fatalf("worked %d + skipped %d, want %d in all, some of each", worked.Load(), skipped.Load(), 4*passes)
		}
		if len(owners) != 4*passes {
			t.Fatalf("%d distinct pass owners for %d passes", len(owners), 4*passes)
		}
	})
}

// TestPanicReleasesLease makes a hook panic inside a pass: RunOnce re-raises
// the panic after releasing the reaper lease and counting a failed pass, and
// the next pass works.
func TestPanicReleasesLease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		var panicked atomic.Bool
		var failed atomic.Value
		r := newReaper(t, iso.DB, &Config{Hooks: &Hooks{
			OnPassStart: func(dblock.Token) {
				if panicked.CompareAndSwap(false, true) {
					panic("hook bug")
				}
			},
			OnPass: func(_ Stats, err error) {
				if err != nil {
					failed.Store(err)
				}
			},
		}})
		func() {
			defer func() {
				if p := recover(); p != "hook bug" {
					t.Fatalf("recovered %v, want the hook's panic", p)
				}
			}()
			_, _ = r.RunOnce(context.Background())
			t.Fatal("RunOnce returned instead of panicking")
		}()
		if h := holder(t, iso.DB, LeaseName); h.Held() {
			t.Fatalf("reaper lease still held after the panic: %+v", h)
		}
		if err, _ := failed.Load().(error); err == nil || err.Error() != "reaper: pass panicked: hook bug" {
			t.Fatalf("OnPass saw %v, want the panic as the pass's error", err)
		}
		if err := r.Healthy(context.Background()); err == nil {
			t.Fatal("healthy after a panicked pass of a Reaper not started, want the failure")
		}
		if st := runOnce(t, r); !st.Worked {
			t.Fatalf("pass after the panic: %+v, want it to work", st)
		}
	})
}

// TestStepCutAtLeaseDeadline runs a batch that would outlast the reaper
// lease, whose renewals fail (its pool is closed): it is cancelled at the
// lease's local deadline, well before its query timeout, and reported as the
// lease lost.
func TestStepCutAtLeaseDeadline(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	broken := iso.Open(t)
	r := newReaper(t, broken, &Config{QueryTimeout: time.Minute})
	_ = broken.Close()
	l := holdForTest(t, r, 1, time.Now().Add(-r.leaseTTL+100*time.Millisecond)) // 100 ms left
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := step(ctx, r, l, "block", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
		t.Fatalf("batch past the lease: %v, want the lease lost (expired)", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the batch ran to the hang guard instead of the lease's deadline")
	}
}

// TestStepStopsOnLostLease: a renewal that fails while the lease's local
// deadline is ahead does not stop the pass (the Keeper retries it); a lease
// whose row names another owner is lost, and the next batch does not run.
func TestStepStopsOnLostLease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		broken := iso.Open(t)
		r := newReaper(t, broken, &Config{QueryTimeout: time.Second}) // lease TTL 4 s
		_ = broken.Close()
		due := time.Now().Add(-2 * time.Second) // a renewal is due (a third of the TTL passed)
		l := holdForTest(t, r, 1, due)
		got, err := step(ctx, r, l, "work", func(context.Context) (int, error) { return 7, nil })
		if err != nil || got != 7 {
			t.Fatalf("batch with failing renewals and 2 s of lease left: %d, %v; want it to run", got, err)
		}

		// A working pool where the lease names another owner: taken over.
		r = newReaper(t, iso.DB, &Config{QueryTimeout: time.Second})
		tok := acquire(t, iso.DB, LeaseName, "someone-else", time.Minute)
		l = holdForTest(t, r, tok, due)
		select {
		case <-l.lease.Done():
		case <-ctx.Done():
			t.Fatal("a lease taken over was not reported lost")
		}
		ran := false
		_, err = step(ctx, r, l, "work", func(context.Context) (int, error) { ran = true; return 0, nil })
		if !errors.Is(err, dblock.ErrTakenOver) || ran {
			t.Fatalf("batch under a lease taken over: ran %v, %v; want ErrTakenOver and no batch", ran, err)
		}
	})
}

// holdForTest holds the reaper lease (owner "o", token) as a pass would,
// asked for at start, and releases it at cleanup.
func holdForTest(t *testing.T, r *Reaper, token dblock.Token, start time.Time) *passLease {
	t.Helper()
	l, err := r.holdLease("o", token, start)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.release(context.Background(), l) })
	return l
}

// TestRenewalNearExpiryRacingPasses renews short leases shortly before they
// expire while two reapers run passes back to back, freeing expired garbage
// in small batches: a renewal whose round trip ends before the lease's
// expiry never loses to a pass.
func TestRenewalNearExpiryRacingPasses(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		const (
			holders = 4
			rounds  = 5
			ttl     = time.Second
			renewAt = 700 * time.Millisecond // into the lease
			margin  = 100 * time.Millisecond
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var (
			renewals, checked, failures, reaped, passErrors atomic.Int64
			firstFailure                                    atomic.Value
			holdersDone, reapersDone                        sync.WaitGroup
			stopReapers                                     = make(chan struct{})
		)
		for h := 0; h < holders; h++ {
			holdersDone.Add(1)
			go func() {
				defer holdersDone.Done()
				name, owner := randomName("near"), randomName("owner")
				for round := 0; round < rounds && ctx.Err() == nil; round++ {
					start := time.Now()
					res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
					if err != nil || !res.Acquired {
						// A lease of a previous round that expired uncounted may
						// still be ours, or a pass holds the row: try again.
						time.Sleep(10 * time.Millisecond)
						continue
					}
					acked := start
					for i := 0; i < 2; i++ {
						// Wait until the lease is near its end, then renew.
						time.Sleep(time.Until(acked.Add(renewAt)))
						sent := time.Now()
						ok, err := store.Of(db).RenewLease(ctx, nil, name, owner, res.Token, ttl)
						renewals.Add(1)
						if time.Now().Before(acked.Add(ttl - margin)) {
							checked.Add(1)
							if err != nil || !ok {
								failures.Add(1)
								firstFailure.CompareAndSwap(nil, fmt.Errorf("renewal of %s sent %v into its lease failed: %v %w", name, sent.Sub(acked), ok, err))
							}
						}
						if err != nil || !ok {
							break
						}
						acked = sent
					}
					// Leave expired garbage for the passes to free.
					g := randomName("garbage")
					if _, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: g, Owner: owner, Mode: dblock.ModeOptimistic, TTL: dblock.TTLMin}); err != nil {
						firstFailure.CompareAndSwap(nil, err)
					}
					_, _ = store.Of(db).ReleaseLease(ctx, nil, name, owner, res.Token)
				}
			}()
		}
		for i := 0; i < 2; i++ {
			r := newReaper(t, iso.Open(t), &Config{BatchSize: 1})
			reapersDone.Add(1)
			go func() {
				defer reapersDone.Done()
				for {
					select {
					case <-stopReapers:
						return
					default:
					}
					st, err := r.RunOnce(ctx)
					if err != nil && ctx.Err() == nil {
						passErrors.Add(1)
						firstFailure.CompareAndSwap(nil, err)
					}
					reaped.Add(int64(st.ExpiredFreed))
				}
			}()
		}
		holdersDone.Wait()
		close(stopReapers)
		reapersDone.Wait()
		if ctx.Err() != nil {
			t.Fatalf("hang guard: %v", ctx.Err())
		}
		t.Logf("%s: %d renewals near expiry, %d ended inside the lease, %d leases freed by passes", iso.Kind, renewals.Load(), checked.Load(), reaped.Load())
		if failures.Load() != 0 || passErrors.Load() != 0 {
			t.Fatalf("%d renewals lost inside their lease, %d pass errors; first: %v", failures.Load(), passErrors.Load(), firstFailure.Load())
		}
		if checked.Load() < renewals.Load()/2 {
			t.Fatalf("only %d of %d renewals ended inside their lease: the check was mostly vacuous", checked.Load(), renewals.Load())
		}
		if reaped.Load() == 0 {
			t.Fatal("the passes freed nothing: the race was not exercised")
		}
	})
}

// TestWriteBudgetLimit checks how SQLite batch sizes adapt to the write-lock
// budget.
func TestWriteBudgetLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit, size int
		took        time.Duration
		want        int
	}{
		{1000, 1000, 100 * time.Millisecond, 500},
		{64, 1000, 100 * time.Millisecond, 62}, // never under a sixteenth
		{1, 5, time.Second, 1},
		{62, 1000, time.Millisecond, 124},
		{800, 1000, time.Millisecond, 1000}, // never over the size
		{300, 1000, 15 * time.Millisecond, 300},
	} {
		if got := writeBudgetLimit(tc.limit, tc.size, tc.took); got != tc.want {
			t.Errorf("writeBudgetLimit(%d, %d, %v) = %d, want %d", tc.limit, tc.size, tc.took, got, tc.want)
		}
	}
}
