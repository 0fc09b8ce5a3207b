package semaphore_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/semaphore"
)

// With Config.Fair, a large request is not starved by small ones: the
// small requests behind it wait although a permit is free, a try is
// refused while requests queue, and grants go out in arrival order. The
// queue of a semaphore is not the lock's of the same name.
func TestFairLargeRequestNotStarved(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l, err := semaphore.New(iso.DB, &semaphore.Config{Fair: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := l.Close(); err != nil {
				t.Error(err)
			}
		}()
		const name, limit = "pool", 4
		held, err := l.TryAcquire(ctx, name, limit, 3, dblock.WithOwner("holder"))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		request := func(who string, permits int) {
			defer wg.Done()
			lease, err := l.Acquire(ctx, name, limit, permits, dblock.WithOwner(who), dblock.WithWait(30*time.Second))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
				return
			}
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			errs <- lease.Release(ctx)
		}
		arrivals := []struct {
			who     string
			permits int
		}{{"large", 4}, {"small1", 1}, {"small2", 1}, {"small3", 2}}
		for i, a := range arrivals {
			wg.Add(1)
			go request(a.who, a.permits)
			dbtest.UntilQueued(t, iso, name, store.WaitSemaphore, i+1)
		}
		// One permit is free, and three small requests wait behind the large one.
		if st, err := l.State(ctx, name); err != nil || st.Used != 3 {
			t.Fatalf("state with the queue: %+v, %v; want the holder's 3 out only", st, err)
		}
		if _, err := l.TryAcquire(ctx, name, limit, 1, dblock.WithOwner("try")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("try while requests queue: %v, want refused", err)
		}
		// The lock of the same name has no queue.
		if s, err := iso.Store().PeekGate(ctx, name, store.WaitExclusive, ""); err != nil || s.Queued != 0 {
			t.Fatalf("the lock's queue: %+v, %v; want empty", s, err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// The small ones may go in together, in any order, after the large one.
		if len(order) != 4 || order[0] != "large" {
			t.Fatalf("grants in order %v, want the large request first", order)
		}
		if rest := slices.Sorted(slices.Values(order[1:])); !slices.Equal(rest, []string{"small1", "small2", "small3"}) {
			t.Fatalf("grants %v", order)
		}
		dbtest.UntilQueued(t, iso, name, store.WaitSemaphore, 0)
	})
}
