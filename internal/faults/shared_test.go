package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// sharedHolders are the holders of shared leases the fault tests run: a
// reader (rwlock), with a writer as its rival, and a semaphore's only
// permit, with another grant of it as the rival.
var sharedHolders = []struct {
	name string
	// take acquires the shared lease on db; rival tries to take what it
	// excludes, from db.
	take  func(ctx context.Context, hdb *dialect.DB, ttl time.Duration) (*dblock.Lease, func(), error)
	rival func(ctx context.Context, iso *dbtest.Isolated) error
}{
	{dblock.ModeRead,
		func(ctx context.Context, hdb *dialect.DB, ttl time.Duration) (*dblock.Lease, func(), error) {
			l, err := rwlock.New(hdb, &rwlock.Config{Logger: quiet})
			if err != nil {
				return nil, nil, err
			}
			lease, err := l.AcquireRead(ctx, "shared-death", dblock.WithTTL(ttl))
			return lease, func() { _ = l.Close() }, err
		},
		func(ctx context.Context, iso *dbtest.Isolated) error {
			l, err := rwlock.New(iso.DB, nil)
			if err != nil {
				return err
			}
			defer l.Close()
			w, err := l.TryAcquire(ctx, "shared-death", dblock.WithTTL(time.Minute))
			if err == nil {
				_ = w.Release(ctx)
			}
			return err
		}},
	{dblock.ModeSemaphore,
		func(ctx context.Context, hdb *dialect.DB, ttl time.Duration) (*dblock.Lease, func(), error) {
			l, err := semaphore.New(hdb, &semaphore.Config{Logger: quiet})
			if err != nil {
				return nil, nil, err
			}
			lease, err := l.Acquire(ctx, "shared-death", 1, 1, dblock.WithTTL(ttl))
			return lease, func() { _ = l.Close() }, err
		},
		func(ctx context.Context, iso *dbtest.Isolated) error {
			l, err := semaphore.New(iso.DB, nil)
			if err != nil {
				return err
			}
			defer l.Close()
			g, err := l.TryAcquire(ctx, "shared-death", 1, 1, dblock.WithTTL(time.Minute))
			if err == nil {
				_ = g.Release(ctx)
			}
			return err
		}},
}

// TestFaultConnectionDeathShared kills, server-side and repeatedly, every
// connection of a process holding a reader's lease or a semaphore's permit:
// the watchdog renews on fresh connections, the lease is never reported
// lost, the rival (a writer; another grant) is refused throughout, and
// Release succeeds. The death of the holding process itself (SIGKILL) is
// sharedstress's, run by the rwlock and semaphore packages.
func TestFaultConnectionDeathShared(t *testing.T) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		for _, h := range sharedHolders {
			t.Run(string(kind)+"/"+h.name, func(t *testing.T) {
				t.Parallel()
				iso := dbtest.New(t, kind)
				hdb, k := holderDB(t, iso)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				const ttl = leaseModeTTL
				lease, closeHolder, err := h.take(ctx, hdb, ttl)
				if err != nil {
					t.Fatal(err)
				}
				defer closeHolder()
				killed := 0
				for end := time.Now().Add(4 * ttl); time.Now().Before(end); {
					kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
					n, err := k.kill(kctx)
					kcancel()
					if err != nil {
						t.Fatalf("kill the holder's sessions: %v", err)
					}
					killed += n
					if err := lease.Err(); err != nil {
						t.Fatalf("after %d killed sessions the lease was reported lost: %v", killed, err)
					}
					if err := h.rival(ctx, iso); !errors.Is(err, dblock.ErrNotAcquired) {
						t.Fatalf("rival while the holder's lease is renewed: %v, want refused", err)
					}
					time.Sleep(ttl / 3)
				}
				if killed == 0 {
					t.Fatal("no session of the holder was found to kill")
				}
				if err := lease.Release(ctx); err != nil {
					t.Fatalf("release after %d killed sessions: %v", killed, err)
				}
				if err := h.rival(ctx, iso); err != nil {
					t.Fatalf("rival after the release: %v", err)
				}
				t.Logf("%d holder sessions killed over %v; the %s lease stayed held and released cleanly", killed, 4*ttl, h.name)
			})
		}
	}
}
