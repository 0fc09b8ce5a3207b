package optimistic_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

// TestAcquireManyAllOrNothing: a set is taken whole or not at all. While one
// of its names is held by another owner, TryAcquireMany names that holder and
// leaves every other name of the set free; AcquireMany waits for it and then
// takes the whole set, each name with its own token and release.
func TestAcquireManyAllOrNothing(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l := newOptimistic(t, iso.DB)
		other := newOptimistic(t, iso.Open(t))
		a, b, c := locktest.RandomName("many-a"), locktest.RandomName("many-b"), locktest.RandomName("many-c")

		blocker, err := other.TryAcquire(ctx, b, dblock.WithOwner("blocker"), dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
		if err != nil {
			t.Fatalf("blocker: %v", err)
		}
		_, err = l.TryAcquireMany(ctx, []string{c, b, a})
		var held *dblock.HeldError
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.As(err, &held) || held.Name != b || held.Owner != "blocker" {
			t.Fatalf("TryAcquireMany with %s held = %v, want ErrNotAcquired naming %s held by blocker", b, err, b)
		}
		for _, name := range []string{a, c} {
			if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Held() {
				t.Fatalf("%s after a refused TryAcquireMany: %+v, %v; want free", name, h, err)
			}
		}

		got := make(chan error, 1)
		var leases []*dblock.Lease
		go func() {
			var err error
			leases, err = l.AcquireMany(ctx, []string{c, b, a, b}, dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
			got <- err
		}()
		// It waits while b is held (checked for a while; returning later
		// would be as wrong, but this is what a test can see).
		select {
		case err := <-got:
			t.Fatalf("AcquireMany returned while %s was held: %v", b, err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := blocker.Release(ctx); err != nil {
			t.Fatalf("release blocker: %v", err)
		}
		if err := <-got; err != nil {
			t.Fatalf("AcquireMany after the release: %v", err)
		}
		if len(leases) != 3 {
			t.Fatalf("AcquireMany returned %d leases, want 3 (duplicates count once)", len(leases))
		}
		for i, want := range []string{a, b, c} { // Sorted: many-a < many-b < many-c.
			if leases[i].Name() != want {
				t.Fatalf("lease %d is %s, want %s", i, leases[i].Name(), want)
			}
			h, err := iso.Store().LeaseHolder(ctx, nil, want)
			if err != nil || !h.Held() || h.Owner != leases[i].Owner() || dblock.Token(h.Version) != leases[i].Token() {
				t.Fatalf("%s: row %+v (%v), lease owner %s token %d", want, h, err, leases[i].Owner(), leases[i].Token())
			}
		}
		if tok := leases[1].Token(); tok <= blocker.Token() {
			t.Fatalf("token of %s after the blocker: %d, not above the blocker's %d", b, tok, blocker.Token())
		}
		if _, err := other.TryAcquire(ctx, c); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a name in a held set: %v, want ErrNotAcquired", err)
		}
		for _, lease := range leases {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("release %s: %v", lease.Name(), err)
			}
		}
		for _, name := range []string{a, b, c} {
			if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Held() {
				t.Fatalf("%s after release: %+v, %v; want free", name, h, err)
			}
		}
	})
}

// TestAcquireManyBadInput: no names, or one bad name among good ones, is
// refused before anything is written.
func TestAcquireManyBadInput(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		l := newOptimistic(t, iso.DB)
		if _, err := l.AcquireMany(ctx, nil); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("AcquireMany(nil) = %v, want ErrInvalidName", err)
		}
		good := locktest.RandomName("many-good")
		if _, err := l.TryAcquireMany(ctx, []string{good, "bad\x00name"}); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("TryAcquireMany with a NUL name = %v, want ErrInvalidName", err)
		}
		if _, err := l.TryAcquireMany(ctx, []string{good}, dblock.WithTTL(-time.Second)); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("TryAcquireMany with a negative TTL = %v, want ErrInvalidOption", err)
		}
		if h, err := iso.Store().LeaseHolder(ctx, nil, good); err != nil || h.Exists {
			t.Errorf("row of %s after refused calls: %+v, %v; want none", good, h, err)
		}
	})
}

// TestAcquireManyOverlappingSets: goroutines taking random overlapping sets
// of a few names never hold one name at once, and all finish (no deadlock,
// no set held in part while waiting for the rest).
func TestAcquireManyOverlappingSets(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l := newOptimistic(t, iso.DB)
		names := make([]string, 5)
		for i := range names {
			names[i] = locktest.RandomName(fmt.Sprintf("overlap-%d", i))
		}
		inside := make([]atomic.Int32, len(names))
		var overlaps, done atomic.Int32
		const workers, rounds = 6, 8
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					idx := rand.Perm(len(names))[:3]
					set := make([]string, len(idx))
					for i, j := range idx {
						set[i] = names[j]
					}
					leases, err := l.AcquireMany(ctx, set, dblock.WithOwner(fmt.Sprintf("worker-%d", w)), dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
					if err != nil {
						t.Errorf("worker %d: AcquireMany: %v", w, err)
						return
					}
					for _, j := range idx {
						if inside[j].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(time.Millisecond)
					for _, j := range idx {
						inside[j].Add(-1)
					}
					for _, lease := range leases {
						if err := lease.Release(ctx); err != nil {
							t.Errorf("worker %d: release %s: %v", w, lease.Name(), err)
						}
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Fatalf("%d times a name was held by two sets at once", n)
		}
		if n := done.Load(); n != workers*rounds {
			t.Fatalf("%d sets taken, want %d", n, workers*rounds)
		}
	})
}
