package rwlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/sharedstress"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/rwlock"
)

func newLocker(t *testing.T, iso *dbtest.Isolated, cfg *rwlock.Config) *rwlock.Locker {
	t.Helper()
	l, err := rwlock.New(iso.DB, cfg)
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

func mustRelease(t *testing.T, ctx context.Context, lease *dblock.Lease) {
	t.Helper()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release %s: %v", lease.Name(), err)
	}
}

// Many readers share a name; a writer waits for all of them; readers wait
// for the writer.
func TestReadersShareWritersExclude(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, nil)
		r1, err := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("r1"))
		if err != nil {
			t.Fatalf("read 1: %v", err)
		}
		r2, err := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("r2"))
		if err != nil {
			t.Fatalf("read 2: %v", err)
		}
		if r1.Token() != r2.Token() || r1.Mode() != dblock.ModeRead {
			t.Fatalf("readers' tokens %d, %d (mode %s): want one token of mode read", r1.Token(), r2.Token(), r1.Mode())
		}
		_, err = l.TryAcquire(ctx, "doc", dblock.WithOwner("w"))
		var held *dblock.HeldError
		if !errors.As(err, &held) || held.Mode != dblock.ModeRead {
			t.Fatalf("write while read: %v, want held by readers", err)
		}
		mustRelease(t, ctx, r1)
		if _, err := l.TryAcquire(ctx, "doc", dblock.WithOwner("w")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("write while one reader is left: %v", err)
		}
		mustRelease(t, ctx, r2)
		w, err := l.TryAcquire(ctx, "doc", dblock.WithOwner("w"))
		if err != nil {
			t.Fatalf("write after the readers left: %v", err)
		}
		if w.Token() <= r1.Token() || w.Mode() != dblock.ModeWrite {
			t.Fatalf("writer's token %d (mode %s), readers' %d: want a greater one", w.Token(), w.Mode(), r1.Token())
		}
		if _, err := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("r3")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("read while written: %v", err)
		}
		mustRelease(t, ctx, w)
		r3, err := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("r3"))
		if err != nil {
			t.Fatalf("read after the writer: %v", err)
		}
		if r3.Token() <= w.Token() {
			t.Fatalf("new readers' token %d, want above the writer's %d", r3.Token(), w.Token())
		}
		mustRelease(t, ctx, r3)
	})
}

// Readers block every exclusive mode, and every exclusive mode blocks readers.
func TestOneNamespace(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, nil)
		opt, err := optimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer opt.Close()
		pess, err := pessimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pess.Close()

		r, err := l.TryAcquireRead(ctx, "n", dblock.WithOwner("r"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := opt.TryAcquire(ctx, "n", dblock.WithOwner("o")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("optimistic over readers: %v", err)
		}
		if _, err := pess.TryAcquire(ctx, "n"); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("pessimistic over readers: %v", err)
		}
		mustRelease(t, ctx, r)

		o, err := opt.TryAcquire(ctx, "n", dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquireRead(ctx, "n", dblock.WithOwner("r")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("read over optimistic: %v", err)
		}
		mustRelease(t, ctx, o)

		p, err := pess.TryAcquire(ctx, "n")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquireRead(ctx, "n", dblock.WithOwner("r")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("read over pessimistic: %v", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r, err = l.TryAcquireRead(ctx, "n", dblock.WithOwner("r"))
		if err != nil {
			t.Fatalf("read after all: %v", err)
		}
		mustRelease(t, ctx, r)
	})
}

// A read holder asking for the write lock is refused at once; a write
// holder may take the read lock, and its release leaves the name to
// readers, not to a waiting writer.
func TestUpgradeAndDowngrade(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, nil)
		r, err := l.AcquireRead(ctx, "u", dblock.WithOwner("a"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = l.Acquire(ctx, "u", dblock.WithOwner("a"), dblock.WithWait(30*time.Second))
		if !errors.Is(err, rwlock.ErrUpgrade) || !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("upgrade: %v, want ErrUpgrade", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("upgrade refused after %v: it waited", time.Since(start))
		}
		mustRelease(t, ctx, r)

		w, err := l.Acquire(ctx, "u", dblock.WithOwner("a"))
		if err != nil {
			t.Fatal(err)
		}
		down, err := l.AcquireRead(ctx, "u", dblock.WithOwner("a"))
		if err != nil {
			t.Fatalf("downgrade: %v", err)
		}
		if down.Token() != w.Token() {
			t.Fatalf("downgraded read token %d, write token %d", down.Token(), w.Token())
		}
		// A writer waits meanwhile; the release of the write lock must not let it in.
		other, err := rwlock.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		got := make(chan error, 1)
		go func() {
			wl, err := other.Acquire(ctx, "u", dblock.WithOwner("b"), dblock.WithWait(20*time.Second))
			if err == nil {
				err = wl.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		mustRelease(t, ctx, w)
		if _, err := other.TryAcquire(ctx, "u", dblock.WithOwner("c")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("write after the downgraded writer's release: %v, want held by its read", err)
		}
		select {
		case err := <-got:
			t.Fatalf("waiting writer finished while the downgraded read was held: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		mustRelease(t, ctx, down)
		if err := <-got; err != nil {
			t.Fatalf("waiting writer after the read's release: %v", err)
		}
	})
}

// A waiting writer keeps new readers out, so a stream of readers cannot
// starve it.
func TestWriterNotStarved(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, nil)
		first, err := l.AcquireRead(ctx, "s", dblock.WithOwner("r0"))
		if err != nil {
			t.Fatal(err)
		}
		wrote := make(chan error, 1)
		go func() {
			w, err := l.Acquire(ctx, "s", dblock.WithOwner("w"), dblock.WithWait(30*time.Second))
			if err == nil {
				err = w.Release(ctx)
			}
			wrote <- err
		}()
		// Wait until the writer has marked the name.
		deadline := time.Now().Add(10 * time.Second)
		for {
			probe, err := l.TryAcquireRead(ctx, "s", dblock.WithOwner("probe"))
			if errors.Is(err, dblock.ErrNotAcquired) {
				break
			}
			if err == nil {
				mustRelease(t, ctx, probe) // The writer has not marked the name yet.
			}
			if time.Now().After(deadline) {
				t.Fatalf("writer never kept readers out: %v", err)
			}
		}
		// The first reader re-enters (it must not wait for a writer waiting for it).
		again, err := l.TryAcquireRead(ctx, "s", dblock.WithOwner("r0"))
		if err != nil {
			t.Fatalf("re-entry of a reader while a writer waits: %v", err)
		}
		mustRelease(t, ctx, again)
		mustRelease(t, ctx, first)
		if err := <-wrote; err != nil {
			t.Fatalf("writer: %v", err)
		}
	})
}

// Processes take read and write locks of one name; some are killed while
// they hold. No writer ever overlapped anyone, and tokens ordered.
func TestProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process stress test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		t.Run("plain", func(t *testing.T) { sharedstress.Run(t, iso, sharedstress.KindRW, 5, 60, 2) })
		t.Run("fair", func(t *testing.T) { sharedstress.Run(t, iso, sharedstress.KindRWFair, 5, 40, 2) })
	})
}

// An owner holding the read lock is refused the write lock at once even
// while another writer of the same Locker waits for the name (it would
// queue behind that writer, who waits for the owner's read lock).
func TestUpgradeWhileWriterWaits(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, nil)
		r, err := l.AcquireRead(ctx, "up", dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		wrote := make(chan error, 1)
		go func() {
			w, err := l.Acquire(ctx, "up", dblock.WithOwner("writer"), dblock.WithWait(30*time.Second))
			if err == nil {
				err = w.Release(ctx)
			}
			wrote <- err
		}()
		// Wait until the writer has marked the name (it waits, in line).
		deadline := time.Now().Add(10 * time.Second)
		for {
			probe, err := l.TryAcquireRead(ctx, "up", dblock.WithOwner("probe"))
			if errors.Is(err, dblock.ErrNotAcquired) {
				break
			}
			if err == nil {
				mustRelease(t, ctx, probe)
			}
			if time.Now().After(deadline) {
				t.Fatalf("writer never waited: %v", err)
			}
		}
		for range 3 {
			if _, err := l.Acquire(ctx, "up", dblock.WithOwner("o"), dblock.WithWait(20*time.Second)); !errors.Is(err, rwlock.ErrUpgrade) {
				t.Fatalf("upgrade while a writer of the Locker waits: %v, want ErrUpgrade", err)
			}
		}
		mustRelease(t, ctx, r)
		if err := <-wrote; err != nil {
			t.Fatalf("writer: %v", err)
		}
	})
}
