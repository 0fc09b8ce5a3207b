package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestMinHoldKeepsLock: a lease with WithMinHold released at once stays
// held by its owner until the minimum after its acquisition, by the
// database clock, and is free after; a re-entered hold's inner release
// does not keep it; a release after the minimum frees it at once.
func TestMinHoldKeepsLock(t *testing.T) {
	t.Parallel()
	const minHold = 1200 * time.Millisecond
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fair, err := fairqueue.New(iso.DB, &fairqueue.Config{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fair.Close() })
		for modeName, l := range map[string]dblock.Locker{"optimistic": newOptimistic(t, iso.DB), "fair": fair} {
			name := locktest.RandomName("minhold")
			lease, err := l.Acquire(ctx, name, dblock.WithMinHold(minHold), dblock.WithOwner("a"))
			if err != nil {
				t.Fatalf("%s: %v", modeName, err)
			}
			acquired := time.Now()
			inner, err := l.Acquire(ctx, name, dblock.WithMinHold(minHold), dblock.WithOwner("a"))
			if err != nil {
				t.Fatalf("%s: re-entry: %v", modeName, err)
			}
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || !h.Held() || h.Owner != "a" || h.Reentry != 1 {
				t.Fatalf("%s: after the release: %+v, %v: want kept by its owner", modeName, h, err)
			}
			if _, err := l.TryAcquire(ctx, name, dblock.WithOwner("b")); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("%s: another owner before the minimum: %v", modeName, err)
			}
			iso.WaitExpired(t, ctx, name)
			if d := time.Since(acquired); d < minHold-200*time.Millisecond {
				t.Fatalf("%s: free %v after the acquisition, minimum %v", modeName, d, minHold)
			}
			late, err := l.TryAcquire(ctx, name, dblock.WithOwner("b"), dblock.WithMinHold(10*time.Millisecond))
			if err != nil {
				t.Fatalf("%s: after the minimum: %v", modeName, err)
			}
			time.Sleep(50 * time.Millisecond)
			if err := late.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Held() {
				t.Fatalf("%s: release after its minimum: %+v, %v: want free", modeName, h, err)
			}
		}
	})
}

// WithMinHold is refused where it cannot be honoured, and beside a shorter
// max hold.
func TestMinHoldRefused(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, "sqlite")
	ctx := context.Background()
	l := newOptimistic(t, iso.DB)
	if _, err := l.TryAcquire(ctx, "x", dblock.WithMinHold(time.Minute), dblock.WithMaxHold(time.Second)); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("min hold above max hold: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "x", dblock.WithMinHold(time.Nanosecond)); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("min hold below TTLMin: %v", err)
	}
	p, err := pessimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.TryAcquire(ctx, "x", dblock.WithMinHold(time.Second)); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("pessimistic: %v", err)
	}
}
