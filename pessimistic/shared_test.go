package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/rwlock"
)

// Shared holds share a name with each other (one database lock of the
// row each) and with rwlock's readers, and keep every exclusive acquirer
// out; on SQLite, which locks the database, a shared hold is exclusive.
func TestSharedHolds(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		rowLocks := iso.Kind != store.SQLite
		l1 := newLocker(t, iso.DB, nil)
		other := iso.Open(t)
		l2 := newLocker(t, other, nil)
		rw, err := rwlock.New(other, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		opt, err := optimistic.New(other, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Close()
		name := randName(t)

		s1, err := l1.TryAcquireShared(ctx, name, dblock.WithOwner("a"))
		if err != nil {
			t.Fatalf("shared: %v", err)
		}
		s2, err := l2.TryAcquireShared(ctx, name, dblock.WithOwner("b"))
		if rowLocks && err != nil {
			t.Fatalf("a second shared hold: %v", err)
		}
		if !rowLocks && !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("a second shared hold on SQLite: %v, want refused (one writer)", err)
		}
		for what, try := range map[string]func() error{
			"pessimistic": func() error { _, err := l2.TryAcquire(ctx, name, dblock.WithOwner("c")); return err },
			"optimistic":  func() error { _, err := opt.TryAcquire(ctx, name, dblock.WithOwner("c")); return err },
			"rwlock write": func() error {
				_, err := rw.TryAcquire(ctx, name, dblock.WithOwner("c"))
				return err
			},
		} {
			if err := try(); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Errorf("%s while shared holds: %v, want refused", what, err)
			}
		}
		if iso.Kind == store.Postgres {
			r, err := rw.TryAcquireRead(ctx, name, dblock.WithOwner("reader"))
			if err != nil {
				t.Fatalf("an rwlock reader beside shared holds: %v", err)
			}
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if iso.Kind == store.MySQL {
			// InnoDB has no lock a reader's write of the row could take
			// beside a shared lock: it waits (documented).
			if _, err := rw.TryAcquireRead(ctx, name, dblock.WithOwner("reader")); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("an rwlock reader beside shared holds on MySQL: %v, want refused", err)
			}
		}
		if err := s1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if s2 != nil {
			if err := s2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}

		// Readers hold: a shared hold joins them, an exclusive one does not.
		r, err := rw.TryAcquireRead(ctx, name, dblock.WithOwner("reader"))
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		s1, err = l1.TryAcquireShared(ctx, name, dblock.WithOwner("a"))
		if err != nil {
			t.Fatalf("shared beside a reader: %v", err)
		}
		if _, err := l1.TryAcquire(ctx, name, dblock.WithOwner("c")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("exclusive beside a reader: %v", err)
		}
		if err := s1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// An exclusive lease keeps it out; its release lets a waiting one in.
		w, err := opt.TryAcquire(ctx, name, dblock.WithOwner("writer"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l1.TryAcquireShared(ctx, name, dblock.WithOwner("a"))
		var held *dblock.HeldError
		if !errors.As(err, &held) || held.Owner != "writer" {
			t.Fatalf("shared while a lease is held: %v, want held by writer", err)
		}
		got := make(chan error, 1)
		go func() {
			s, err := l1.AcquireShared(ctx, name, dblock.WithOwner("a"), dblock.WithWait(30*time.Second))
			if err == nil {
				err = s.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("shared after the lease's release: %v", err)
		}
	})
}

// A shared hold is re-entered by its owner; its owner's exclusive
// acquisition is refused with ErrUpgrade at once; an exclusive hold's owner
// takes the shared lock by re-entering it; WithToken and Lock are refused.
func TestSharedOwner(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		s, err := l.AcquireShared(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := l.AcquireShared(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatalf("re-entry: %v", err)
		}
		if _, err := l.Acquire(ctx, name, dblock.WithOwner("o")); !errors.Is(err, pessimistic.ErrUpgrade) || !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("upgrade: %v, want ErrUpgrade", err)
		}
		if err := s.Lock(ctx, randName(t)); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Fatalf("Lock on a shared hold: %v, want ErrInvalidOption", err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.AcquireShared(ctx, name, dblock.WithOwner("o"), dblock.WithToken()); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Fatalf("WithToken: %v, want ErrInvalidOption", err)
		}
		x, err := l.Acquire(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		in, err := l.TryAcquireShared(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatalf("shared by the exclusive holder: %v", err)
		}
		if err := in.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
		err = l.DoShared(ctx, name, func(ctx context.Context, tx *sql.Tx) error { return nil })
		if err != nil {
			t.Fatalf("DoShared: %v", err)
		}
	})
}

// section is one hold of the mixed test: whether it excludes everyone, and
// when it was held (this process's monotonic clock).
type section struct {
	exclusive  bool
	start, end time.Time
}

// Goroutines take one name in every way at once (pessimistic shared and
// exclusive, rwlock reads and writes, optimistic and fair leases): no
// exclusive hold ever overlaps another hold.
func TestSharedMixedExclusion(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		pl := newLocker(t, iso.DB, nil)
		rw, err := rwlock.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		opt, err := optimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Close()
		fair, err := fairqueue.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer fair.Close()
		name := randName(t)
		type way struct {
			exclusive bool
			take      func(owner string) (release func() error, err error)
		}
		lease := func(f func(context.Context, string, ...dblock.Option) (*dblock.Lease, error)) func(string) (func() error, error) {
			return func(owner string) (func() error, error) {
				l, err := f(ctx, name, dblock.WithOwner(owner), dblock.WithWait(20*time.Second))
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}
		}
		held := func(f func(context.Context, string, ...dblock.Option) (*pessimistic.Lease, error)) func(string) (func() error, error) {
			return func(owner string) (func() error, error) {
				l, err := f(ctx, name, dblock.WithOwner(owner), dblock.WithWait(20*time.Second))
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}
		}
		ways := []way{
			{false, held(pl.AcquireShared)}, {true, held(pl.Acquire)},
			{false, lease(rw.AcquireRead)}, {true, lease(rw.Acquire)}, {true, lease(opt.Acquire)},
			{true, lease(fair.Acquire)},
		}
		var mu sync.Mutex
		var got []section
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for g := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 12 {
					w := ways[(g+i)%len(ways)]
					release, err := w.take(fmt.Sprintf("g%d-%d", g, i))
					if err != nil {
						errs <- err
						return
					}
					s := section{exclusive: w.exclusive, start: time.Now()}
					time.Sleep(time.Millisecond)
					s.end = time.Now()
					if err := release(); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					got = append(got, s)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		shared := 0
		for i, a := range got {
			if !a.exclusive {
				shared++
			}
			for _, b := range got[i+1:] {
				if (a.exclusive || b.exclusive) && a.start.Before(b.end) && b.start.Before(a.end) {
					t.Fatalf("an exclusive hold overlapped another: %+v, %+v", a, b)
				}
			}
		}
		t.Logf("%d holds, %d shared", len(got), shared)
	})
}
