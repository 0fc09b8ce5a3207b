package locktest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
)

// checkLastReadersFree: readers of one name, each with a Locker of its own
// as processes would have, that release at the same moment leave the name
// free, so a writer's try right after takes it. A release that counted the
// readers left wrongly (two last readers each seeing the other) would leave
// the name held by readers until their period's end, a TTL away.
func checkLastReadersFree(t *testing.T, s *sharedSuite) {
	ctx, name := s.ctx(), RandomName("rw-last-readers")
	const readers, rounds = 6, 12
	lockers := make([]RW, readers)
	for i := range lockers {
		lockers[i] = s.rw(true)
	}
	writer := s.rw(false)
	for round := range rounds {
		leases := make([]*dblock.Lease, readers)
		for i, l := range lockers {
			lease, err := l.AcquireRead(ctx, name, dblock.WithWait(hangGuard))
			if err != nil {
				t.Fatalf("round %d: reader %d: %v", round, i, err)
			}
			leases[i] = lease
		}
		if err := releaseTogether(ctx, leases); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		lease, err := writer.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("round %d: the writer's try after every reader released: %v", round, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("round %d: the writer's release: %v", round, err)
		}
	}
}

// releaseTogether releases leases from goroutines let go at one moment, and
// returns when every release has answered.
func releaseTogether(ctx context.Context, leases []*dblock.Lease) error {
	start := make(chan struct{})
	errs := make(chan error, len(leases))
	var wg sync.WaitGroup
	for i, lease := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := lease.Release(ctx); err != nil {
				errs <- fmt.Errorf("reader %d's release: %w", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	return <-errs
}
