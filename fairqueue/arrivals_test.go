package fairqueue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

// acquisition is one Acquire of TestFIFOArrivalsDuringHandoffs.
type acquisition struct {
	who        string
	token      dblock.Token
	queued     bool      // it waited in the queue (else it took the name directly)
	joined     time.Time // its waiter row's created_at (queued only)
	visible    time.Time // a database clock reading by which its row was surely visible (queued only)
	acquiredAt time.Time // the lease's acquired_at (database clock)
}

// TestFIFOArrivalsDuringHandoffs provokes the direct path's race, round
// after round, from two Lockers (two pools, as two processes): a holder
// takes the name; a waiter arrives on the other Locker and joins the queue;
// after a random moment the holder releases, and at the release a newcomer
// arrives on the holder's Locker: its direct attempt races the waiter's
// enqueue and take. No acquisition may come before a waiter whose row was
// visible before it began, all by the database clock: a queued one whose
// row was created later, or a direct one whose statement (the lease's
// acquired_at) started later. (A waiter's row is surely visible at its first
// check, or, where the enqueue answers that check (PostgreSQL), at the
// clock read after it; created_at alone comes too early: an insert becomes
// visible only at its commit.)
func TestFIFOArrivalsDuringHandoffs(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		const rounds = 40
		ctx, cancel := context.WithTimeout(context.Background(), fifoHangGuard)
		defer cancel()
		name := locktest.RandomName("arrivals")
		enqueueAnswers := iso.Store().EnqueuesChecked()
		var (
			mu      sync.Mutex
			acqs    []acquisition
			wg      sync.WaitGroup
			armed   atomic.Bool // the next release starts a newcomer
			arrived atomic.Int64
			errs    = make(chan error, 3*rounds)
			lockers [2]*fairqueue.Locker
		)
		// acquire takes the name on l and returns the lease, recording the
		// acquisition; hold is called while it is held.
		acquire := func(l *fairqueue.Locker, who string) (*dblock.Lease, bool) {
			a := acquisition{who: who}
			pctx := fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) {
				if a.queued {
					return
				}
				a.queued, a.joined, a.visible = true, p.Joined, p.Joined.Add(p.Waited)
				if enqueueAnswers {
					// The first report is the enqueue's own answer, read
					// before its commit: the row is surely visible by
					// the next reading of the clock.
					now, err := iso.Store().ClockNow(ctx)
					if err != nil {
						errs <- fmt.Errorf("%s: clock: %w", who, err)
					}
					a.visible = now
				}
			})
			lease, err := l.Acquire(pctx, name)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
				return nil, false
			}
			a.token = lease.Token()
			rows, err := iso.Store().ListLocks(ctx, []string{name})
			if err != nil || len(rows) != 1 || rows[0].Token != int64(a.token) {
				errs <- fmt.Errorf("%s: lock row while held: %+v %v", who, rows, err)
			} else {
				a.acquiredAt = rows[0].AcquiredAt
			}
			mu.Lock()
			acqs = append(acqs, a)
			mu.Unlock()
			return lease, true
		}
		release := func(lease *dblock.Lease, who string) {
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				errs <- fmt.Errorf("%s: release: %w", who, err)
			}
		}
		once := func(l *fairqueue.Locker, who string) {
			defer wg.Done()
			if lease, ok := acquire(l, who); ok {
				release(lease, who)
			}
		}
		for i := range lockers {
			cfg := testConfig(t)
			cfg.Hooks = &dblock.Hooks{OnReleased: func(_ string, _ string, _ dblock.Token, _ time.Duration) {
				if armed.CompareAndSwap(true, false) {
					wg.Add(1)
					go once(lockers[i], fmt.Sprintf("newcomer-%d", arrived.Add(1)))
				}
			}}
			lockers[i] = newFair(t, iso.Open(t), cfg)
			t.Cleanup(func() { _ = lockers[i].Close() })
		}
		for r := 0; r < rounds && ctx.Err() == nil; r++ {
			holder, ok := acquire(lockers[r%2], fmt.Sprintf("holder-%d", r))
			if !ok {
				break
			}
			wg.Add(1)
			go once(lockers[1-r%2], fmt.Sprintf("waiter-%d", r))
			time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
			armed.Store(true)
			release(holder, fmt.Sprintf("holder-%d", r))
			wg.Wait()
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sort.Slice(acqs, func(i, j int) bool { return acqs[i].token < acqs[j].token })
		queued, violations := 0, 0
		var first string
		for i, a := range acqs {
			if i > 0 && a.token == acqs[i-1].token {
				t.Fatalf("two acquisitions with token %d", a.token)
			}
			if a.queued {
				queued++
			}
			for _, w := range acqs[i+1:] {
				if !w.queued {
					continue
				}
				// w acquired after a although its row was visible before a began.
				jumped := a.queued && w.visible.Before(a.joined) || !a.queued && w.visible.Before(a.acquiredAt)
				if jumped {
					violations++
					if first == "" {
						first = fmt.Sprintf("%s (token %d, queued %v, joined %v, acquired %v) came before %s (joined %v, visible by %v)",
							a.who, a.token, a.queued, a.joined, a.acquiredAt, w.who, w.joined, w.visible)
					}
				}
			}
		}
		t.Logf("%s: %d acquisitions (%d through the queue, %d direct), %d FIFO violations",
			iso.Kind, len(acqs), queued, len(acqs)-queued, violations)
		if len(acqs) != 3*rounds {
			t.Fatalf("%d acquisitions, want %d", len(acqs), 3*rounds)
		}
		if violations != 0 {
			t.Fatalf("%d FIFO violations; first: %s", violations, first)
		}
	})
}
