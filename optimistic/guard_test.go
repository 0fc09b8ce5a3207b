package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		l := newOptimistic(t, iso.DB)
		guard := func(lease *dblock.Lease) error {
			t.Helper()
			tx, err := iso.DB.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer func() { _ = tx.Rollback() }()
			if err := l.Guard(ctx, tx, lease); err != nil {
				return err
			}
			return tx.Commit()
		}

		// Held: the guard passes.
		lease, err := l.Acquire(ctx, locktest.RandomName("guard"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if err := guard(lease); err != nil {
			t.Fatalf("guard of a held lease: %v", err)
		}
		// Released: not held, and says so.
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := guard(lease); !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrReleased) {
			t.Fatalf("guard after release: %v, want ErrNotHeld and ErrReleased", err)
		}

		// Freed by an administrator before the watchdog noticed: the guard
		// finds out and ends the lease.
		lease, err = l.Acquire(ctx, locktest.RandomName("guard"), dblock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if ok, err := iso.DB.ForceRelease(ctx, nil, lease.Name()); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		err = guard(lease)
		if !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrForceReleased) {
			t.Fatalf("guard after force release: %v, want ErrNotHeld, ErrLost and ErrForceReleased", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatalf("lease still open after the guard found it gone")
		}
		if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
			t.Fatalf("release after loss: %v, want ErrLost", err)
		}

		// Expired.
		lease, err = l.Acquire(ctx, locktest.RandomName("guard"), dblock.WithTTL(100*time.Millisecond))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		<-lease.Done()
		if err := guard(lease); !errors.Is(err, dblock.ErrNotHeld) || !errors.Is(err, dblock.ErrExpired) {
			t.Fatalf("guard after expiry: %v, want ErrNotHeld and ErrExpired", err)
		}
	})
}
