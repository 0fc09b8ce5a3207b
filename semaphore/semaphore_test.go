package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/sharedstress"
	"github.com/dblock-go/dblock/semaphore"
)

func newLocker(t *testing.T, iso *dbtest.Isolated) *semaphore.Locker {
	t.Helper()
	l, err := semaphore.New(iso.DB, nil)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Never more than the limit out; a double release is refused; the limit
// is the semaphore's own.
func TestLimit(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso)
		a, err := l.TryAcquire(ctx, "api", 3, 2, dblock.WithOwner("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, "api", 3, 2, dblock.WithOwner("b")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("2 more of 3 with 2 out: %v", err)
		}
		b, err := l.TryAcquire(ctx, "api", 3, 1, dblock.WithOwner("b"))
		if err != nil {
			t.Fatalf("the last permit: %v", err)
		}
		if a.Token() == b.Token() || a.Mode() != dblock.ModeSemaphore {
			t.Fatalf("grants' tokens %d, %d (mode %s)", a.Token(), b.Token(), a.Mode())
		}
		if _, err := l.TryAcquire(ctx, "api", 4, 1, dblock.WithOwner("c")); !errors.Is(err, semaphore.ErrLimitMismatch) || !errors.Is(err, dblock.ErrInvalidOption) {
			t.Fatalf("another limit: %v", err)
		}
		st, err := l.State(ctx, "api")
		if err != nil || st != (semaphore.State{Exists: true, Limit: 3, Used: 3}) {
			t.Fatalf("state %+v, %v", st, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); !errors.Is(err, dblock.ErrReleased) {
			t.Fatalf("second release: %v, want ErrReleased", err)
		}
		if st, _ := l.State(ctx, "api"); st.Used != 1 {
			t.Fatalf("after a release of 2: %d out, want 1", st.Used)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Bad input is refused and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso)
		for _, c := range []struct {
			name           string
			limit, permits int
			want           error
		}{
			{"s", 0, 1, dblock.ErrInvalidOption},
			{"s", 2, 3, dblock.ErrInvalidOption},
			{"s", 2, 0, dblock.ErrInvalidOption},
			{"", 2, 1, dblock.ErrInvalidName},
		} {
			if _, err := l.TryAcquire(ctx, c.name, c.limit, c.permits); !errors.Is(err, c.want) {
				t.Errorf("TryAcquire(%q, %d, %d): %v, want %v", c.name, c.limit, c.permits, err, c.want)
			}
		}
		if err := l.SetLimit(ctx, "s", 0); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("SetLimit 0: %v", err)
		}
		if st, err := l.State(ctx, "s"); err != nil || st.Exists {
			t.Errorf("after refusals: %+v, %v: want no semaphore", st, err)
		}
	})
}

// Lowering the limit takes nothing away and admits nobody until the
// permits out are under it.
func TestLowerLimit(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso)
		var held []*dblock.Lease
		for range 3 {
			lease, err := l.TryAcquire(ctx, "pool", 3, 1)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, lease)
		}
		if err := l.SetLimit(ctx, "pool", 1); err != nil {
			t.Fatal(err)
		}
		for _, lease := range held {
			if lease.Err() != nil {
				t.Fatalf("a holder lost its grant to a lower limit: %v", lease.Err())
			}
		}
		if err := held[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := held[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, "pool", 1, 1); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("1 out of a limit of 1: %v", err)
		}
		if err := held[2].Release(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx, "pool", 1, 1)
		if err != nil {
			t.Fatalf("after every holder left: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Processes take permits of one semaphore; some are killed while they
// hold. Never more than the limit out.
func TestProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process stress test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		t.Run("plain", func(t *testing.T) { sharedstress.Run(t, iso, sharedstress.KindSemaphore, 5, 60, 2) })
		t.Run("fair", func(t *testing.T) { sharedstress.Run(t, iso, sharedstress.KindSemaphoreFair, 5, 40, 2) })
	})
}
