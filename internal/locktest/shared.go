package locktest

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// RW is a read-write Locker under test (rwlock.Locker): many readers or
// one writer per name.
type RW interface {
	Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	AcquireRead(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	TryAcquireRead(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	Close() error
}

// RWFactory builds the read-write Locker under test on db, with the fair
// option when fair is set. The suite closes it.
type RWFactory func(t *testing.T, db *dialect.DB, fair bool) RW

// Semaphore is a counting semaphore under test (semaphore.Locker).
type Semaphore interface {
	Acquire(ctx context.Context, name string, limit, permits int, opts ...dblock.Option) (*dblock.Lease, error)
	TryAcquire(ctx context.Context, name string, limit, permits int, opts ...dblock.Option) (*dblock.Lease, error)
	Close() error
}

// SemaphoreFactory builds the semaphore under test on db, with the fair
// option when fair is set. The suite closes it.
type SemaphoreFactory func(t *testing.T, db *dialect.DB, fair bool) Semaphore

// sharedSuite is one check of the shared-lock properties on one database,
// with or without the fair option.
type sharedSuite struct {
	t      *testing.T
	iso    *dbtest.Isolated
	fair   bool
	newRW  RWFactory
	newSem SemaphoreFactory
}

// sharedCheck is one shared-lock property; plain and fair say under which
// option it runs.
type sharedCheck struct {
	name        string
	fn          func(t *testing.T, s *sharedSuite)
	plain, fair bool
}

// RunRW runs the read-write lock properties (never a writer together with
// anyone, tokens in order, readers releasing at once leave the name free,
// a crashed reader's share back at its expiry, a
// writer not starved by a steady stream of readers, arrival order with the
// fair option) as parallel subtests on every dialect.
func RunRW(t *testing.T, f RWFactory) {
	t.Helper()
	runShared(t, &sharedSuite{newRW: f}, []sharedCheck{
		{"WriterExcludesAll", checkWriterExcludesAll, true, true},
		{"LastReadersFree", checkLastReadersFree, true, false},
		{"CrashedReaderReturns", checkCrashedReaderReturns, true, true},
		{"WriterNotStarved", checkWriterNotStarved, true, true},
		{"FairOrder", checkFairOrder, false, true},
	})
}

// RunSemaphore runs the semaphore properties (never more than the limit
// out, a crashed holder's permits back at their expiry with nobody calling,
// a large request not starved by small ones with the fair option) as
// parallel subtests on every dialect.
func RunSemaphore(t *testing.T, f SemaphoreFactory) {
	t.Helper()
	runShared(t, &sharedSuite{newSem: f}, []sharedCheck{
		{"NeverOverLimit", checkNeverOverLimit, true, true},
		{"CrashedHolderReturns", checkCrashedHolderReturns, true, true},
		{"LargeRequestNotStarved", checkLargeRequestNotStarved, false, true},
	})
}

// runShared runs each check under each option it allows, on each dialect's
// database of its own.
func runShared(t *testing.T, proto *sharedSuite, checks []sharedCheck) {
	t.Helper()
	for _, variant := range []struct {
		name string
		fair bool
	}{{"plain", false}, {"fair", true}} {
		for _, c := range checks {
			if (variant.fair && !c.fair) || (!variant.fair && !c.plain) {
				continue
			}
			t.Run(variant.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
					noConnsInUse(t, iso.Store(), "the test database's pool")
					s := *proto
					s.t, s.iso, s.fair = t, iso, variant.fair
					c.fn(t, &s)
				})
			})
		}
	}
}

func (s *sharedSuite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	s.t.Cleanup(cancel)
	return ctx
}

// db returns the test database's pool, or with other a pool of its own,
// as another process would have.
func (s *sharedSuite) db(other bool) *dialect.DB {
	s.t.Helper()
	if !other {
		return s.iso.DB
	}
	db := s.iso.Open(s.t)
	noConnsInUse(s.t, store.Of(db), "another Locker's pool")
	return db
}

// rw returns a read-write Locker, closed at the end of the check.
func (s *sharedSuite) rw(other bool) RW {
	s.t.Helper()
	l := s.newRW(s.t, s.db(other), s.fair)
	s.closeAtEnd(l.Close)
	return l
}

// sem returns a semaphore Locker, closed at the end of the check.
func (s *sharedSuite) sem(other bool) Semaphore {
	s.t.Helper()
	l := s.newSem(s.t, s.db(other), s.fair)
	s.closeAtEnd(l.Close)
	return l
}

func (s *sharedSuite) closeAtEnd(closeFn func() error) {
	s.t.Cleanup(func() {
		if err := closeFn(); err != nil {
			s.t.Errorf("close: %v", err)
		}
	})
}
