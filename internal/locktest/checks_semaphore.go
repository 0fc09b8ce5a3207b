package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// permitCount follows the permits out, as the holders report them, and
// the most ever out at once.
type permitCount struct {
	mu        sync.Mutex
	out, most int
}

func (p *permitCount) add(n int) {
	p.mu.Lock()
	p.out += n
	p.most = max(p.most, p.out)
	p.mu.Unlock()
}

// checkNeverOverLimit: holders of one semaphore, each with a Locker of its
// own, asking for one or two permits: never more than the limit out, as
// the holders count them and as the database counts them.
func checkNeverOverLimit(t *testing.T, s *sharedSuite) {
	ctx, name := s.ctx(), RandomName("sem-limit")
	const limit, workers, rounds = 3, 6, 12
	count := &permitCount{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		l, permits := s.sem(w > 0), 1+w%2
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.holdPermits(ctx, l, name, limit, permits, rounds, count)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if count.most > limit {
		t.Fatalf("%d permits out at once, limit %d", count.most, limit)
	}
	if count.out != 0 {
		t.Fatalf("%d permits counted out after every release", count.out)
	}
}

// holdPermits takes permits of name rounds times, counting them in count
// and reading the database's count inside each hold.
func (s *sharedSuite) holdPermits(ctx context.Context, l Semaphore, name string, limit, permits, rounds int, count *permitCount) error {
	for i := range rounds {
		lease, err := l.Acquire(ctx, name, limit, permits, dblock.WithWait(hangGuard))
		if err != nil {
			return fmt.Errorf("round %d (%d permits): %w", i, permits, err)
		}
		count.add(permits)
		st, err := s.iso.Store().SemaphoreOf(ctx, name)
		if err != nil {
			return err
		}
		if st.Used > limit || st.Used < permits {
			return fmt.Errorf("round %d: the database counts %d permits out (limit %d) while %d are held here", i, st.Used, limit, permits)
		}
		time.Sleep(time.Duration(1+i%3) * time.Millisecond)
		if err := lease.Err(); err != nil {
			return fmt.Errorf("round %d: grant lost while held: %w", i, err)
		}
		count.add(-permits)
		if err := lease.Release(ctx); err != nil {
			return fmt.Errorf("round %d: release: %w", i, err)
		}
	}
	return nil
}

// checkCrashedHolderReturns: a holder that stops renewing, as a crashed
// process does, and never releases gets its permits back at its expiry by
// the database's clock, with nobody calling: the database's count drops by
// itself, and a waiter is granted them.
func checkCrashedHolderReturns(t *testing.T, s *sharedSuite) {
	ctx, name := s.ctx(), RandomName("sem-crash")
	crashed, l := s.sem(false), s.sem(true)
	const ttl, limit = 400 * time.Millisecond, 2
	start := time.Now()
	held, err := crashed.TryAcquire(ctx, name, limit, limit, dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, name, limit, 1); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("a permit beyond the limit: %v, want ErrNotAcquired", err)
	}
	untilUsed(t, s, ctx, name, 0)
	if since := time.Since(start); since < ttl {
		t.Fatalf("the permits came back %v after the grant of a %v lease", since, ttl)
	}
	waitDone(t, held)
	if !errors.Is(held.Err(), dblock.ErrExpired) {
		t.Fatalf("crashed holder's Err: %v, want ErrExpired", held.Err())
	}
	next, err := l.Acquire(ctx, name, limit, limit, dblock.WithWait(hangGuard))
	if err != nil {
		t.Fatalf("the permits after the holder's expiry: %v", err)
	}
	if err := held.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("release of the expired grant: %v, want ErrLost", err)
	}
	if _, err := crashed.TryAcquire(ctx, name, limit, 1); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("a permit after the old grant's release, with the limit out: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// untilUsed waits until the database counts n permits of name out.
func untilUsed(t *testing.T, s *sharedSuite, ctx context.Context, name string, n int) {
	t.Helper()
	for {
		st, err := s.iso.Store().SemaphoreOf(ctx, name)
		if err != nil {
			t.Fatalf("read %q: %v", name, err)
		}
		if st.Used == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d permits of %q out, want %d", st.Used, name, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkLargeRequestNotStarved: with the fair option, a large request is not
// starved by small ones: the small requests behind it wait although a
// permit is free, a try is refused while requests queue, and the large one
// is granted first. The queue of a semaphore is not the lock's of the same
// name.
func checkLargeRequestNotStarved(t *testing.T, s *sharedSuite) {
	ctx, name := s.ctx(), RandomName("sem-fair")
	const limit = 4
	l := s.sem(false)
	held, err := l.TryAcquire(ctx, name, limit, 3, dblock.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	g := &grantOrder{}
	var wg sync.WaitGroup
	arrivals := []struct {
		who     string
		permits int
	}{{"large", 4}, {"small1", 1}, {"small2", 1}, {"small3", 2}}
	errs := make(chan error, len(arrivals))
	for i, a := range arrivals {
		own := s.sem(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.holdPermitsBriefly(ctx, own, name, limit, a.permits, a.who)
		}()
		dbtest.UntilQueued(t, s.iso, name, store.WaitSemaphore, i+1)
	}
	// One permit is free, and three small requests wait behind the large one.
	if st, err := s.iso.Store().SemaphoreOf(ctx, name); err != nil || st.Used != 3 {
		t.Fatalf("with the queue: %+v, %v; want the holder's 3 out only", st, err)
	}
	if _, err := l.TryAcquire(ctx, name, limit, 1, dblock.WithOwner("try")); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("try while requests queue: %v, want refused", err)
	}
	if q, err := s.iso.Store().PeekGate(ctx, name, store.WaitExclusive, ""); err != nil || q.Queued != 0 {
		t.Fatalf("the lock's queue: %+v, %v; want empty", q, err)
	}
	release(t, held)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The small ones may go in together, in any order, after the large one.
	if len(g.order) != 4 || g.order[0] != "large" {
		t.Fatalf("grants in order %v, want the large request first", g.order)
	}
	if rest := slices.Sorted(slices.Values(g.order[1:])); !slices.Equal(rest, []string{"small1", "small2", "small3"}) {
		t.Fatalf("grants %v", g.order)
	}
	dbtest.UntilQueued(t, s.iso, name, store.WaitSemaphore, 0)
}

// holdPermitsBriefly takes permits of name as who, records the grant,
// holds it a moment and releases.
func (g *grantOrder) holdPermitsBriefly(ctx context.Context, l Semaphore, name string, limit, permits int, who string) error {
	lease, err := l.Acquire(ctx, name, limit, permits, dblock.WithOwner(who), dblock.WithWait(hangGuard))
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	g.add(who)
	time.Sleep(20 * time.Millisecond)
	return lease.Release(ctx)
}
