package optimistic

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
)

// TestReservationBeatsLocalHandOff: a waiter of another Locker (as another
// process would be) that began waiting first is served before the waiter
// that the releasing Locker wakes at once. Without the reservation the
// local waiter, asking the moment the name is freed, wins.
func TestReservationBeatsLocalHandOff(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const name = "reserved"
		la, lb, held := twoLockers(t, ctx, iso, name)
		order := make(chan string, 2)
		var wg sync.WaitGroup
		take := func(l *Locker, owner string) {
			defer wg.Done()
			lease, err := l.Acquire(ctx, name, dblock.WithOwner(owner))
			if err != nil {
				t.Errorf("%s: %v", owner, err)
				return
			}
			order <- owner
			if err := lease.Release(ctx); err != nil {
				t.Errorf("%s release: %v", owner, err)
			}
		}
		wg.Add(2)
		go take(lb, "b1")
		untilReserved(t, ctx, iso, name, "b1")
		go take(la, "a2")
		waitLine(t, la, name, 1)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(order)
		if first := <-order; first != "b1" {
			t.Fatalf("served first: %s, want b1 (the other Locker's waiter, which reserved the name)", first)
		}
		if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Next.Owner != "" {
			t.Fatalf("the reservation after both were served: %+v, %v", h, err)
		}
	})
}

// twoLockers returns two Lockers on iso, as two processes would have, and
// a lease of name that the first holds for owner a1.
func twoLockers(t *testing.T, ctx context.Context, iso *dbtest.Isolated, name string) (la, lb *Locker, held *dblock.Lease) {
	t.Helper()
	la, lb = newGateLocker(t, iso), newGateLocker(t, iso)
	held, err := la.Acquire(ctx, name, dblock.WithOwner("a1"))
	if err != nil {
		t.Fatal(err)
	}
	return la, lb, held
}

// untilReserved waits (bounded) until name is reserved for owner.
func untilReserved(t *testing.T, ctx context.Context, iso *dbtest.Isolated, name, owner string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		if h.Next.Owner == owner && h.Next.LiveAt(h.Now) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not reserved for %s: %+v", name, owner, h)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReservationGivenUp: a waiter whose wait ends without the name gives
// its reservation up, and the name is free for anyone at once.
func TestReservationGivenUp(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const name = "given-up"
		la, lb, held := twoLockers(t, ctx, iso, name)
		waitCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := lb.Acquire(waitCtx, name, dblock.WithOwner("b1"))
			done <- err
		}()
		untilReserved(t, ctx, iso, name, "b1")
		stop()
		if err := <-done; err == nil {
			t.Fatal("a cancelled wait returned a lease")
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := la.TryAcquire(ctx, name, dblock.WithOwner("a3"))
		if err != nil {
			t.Fatalf("try after the reserver gave up: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReserverSleeps: a reserver's first sleep where nothing announces a
// release is a tenth of PollMin (at least 500 µs, at most PollMin), so a
// name freed across processes changes hands within a look or two; where
// releases are announced it is PollMin. Its cap is unchanged either way;
// a waiter kept out by the reservation looks twice as often where nothing
// announces.
func TestReserverSleeps(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		for _, tc := range []struct {
			pollMin, polled time.Duration // polled: the first sleep where nothing announces
		}{
			{PollMinDefault, 500 * time.Microsecond},
			{20 * time.Millisecond, 2 * time.Millisecond},
			{300 * time.Microsecond, 300 * time.Microsecond},
		} {
			l, err := New(iso.DB, &Config{PollMin: tc.pollMin})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.polled
			if l.hub != nil {
				want = tc.pollMin
			}
			if got := l.reserverFirst(); got != want {
				t.Errorf("PollMin %v, announced %t: first sleep %v, want %v", tc.pollMin, l.hub != nil, got, want)
			}
			if got, cap := l.reserverFirst(), l.reserverPoll(); got > cap {
				t.Errorf("PollMin %v: first sleep %v above the cap %v", tc.pollMin, got, cap)
			}
			// A waiter kept out by another's reservation: half the
			// reserver's cap where nothing announces, the same elsewhere.
			if got, mine := l.keptPoll(false), l.keptPoll(true); mine != l.reserverPoll() || (l.hub == nil) != (got < mine) {
				t.Errorf("PollMin %v, announced %t: kept out %v, reserver %v", tc.pollMin, l.hub != nil, got, mine)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
