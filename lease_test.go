package dblock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
)

func newLease(t *testing.T, release func(context.Context) error) (*dblock.Lease, mode.Control) {
	t.Helper()
	return mode.NewLease(mode.LeaseParams{
		Name: "n", Owner: "o", Mode: dblock.ModeOptimistic, Token: 7,
		Deadline: time.Now().Add(time.Minute), Release: release,
	})
}

func TestLeaseReleaseOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	l, _ := newLease(t, func(context.Context) error { calls.Add(1); return nil })
	if l.Err() != nil {
		t.Fatalf("held lease has Err %v", l.Err())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(l.Err(), dblock.ErrReleased) {
		t.Fatalf("Err after release = %v", l.Err())
	}
	if err := l.Release(context.Background()); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("second release = %v, want ErrReleased", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("release func called %d times", calls.Load())
	}
}

func TestLeaseLostThenRelease(t *testing.T) {
	t.Parallel()
	l, ctl := newLease(t, func(context.Context) error { return dblock.ErrNotHeld })
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	if !ctl.Lose(dblock.ErrTakenOver) {
		t.Fatal("first Lose did not end the lease")
	}
	if ctl.Lose(dblock.ErrExpired) {
		t.Fatal("second Lose ended the lease again")
	}
	<-l.Done()
	if !errors.Is(l.Err(), dblock.ErrLost) || !errors.Is(l.Err(), dblock.ErrTakenOver) {
		t.Fatalf("Err = %v, want ErrLost and ErrTakenOver", l.Err())
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, dblock.ErrTakenOver) {
		t.Fatalf("context cause = %v", cause)
	}
	err := l.Release(context.Background())
	if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrTakenOver) {
		t.Fatalf("release after loss = %v", err)
	}
}

func TestLeaseLostDuringRelease(t *testing.T) {
	t.Parallel()
	var ctl mode.Control
	var l *dblock.Lease
	l, ctl = newLease(t, func(context.Context) error {
		ctl.Lose(dblock.ErrExpired) // the release found the lease gone
		return dblock.ErrNotHeld
	})
	err := l.Release(context.Background())
	if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
		t.Fatalf("release = %v, want ErrLost/ErrExpired", err)
	}
	<-l.Done()
}

func TestRunCancelsOnLoss(t *testing.T) {
	t.Parallel()
	l, ctl := newLease(t, func(context.Context) error { return nil })
	err := mode.Run(context.Background(), l, time.Second, func(ctx context.Context) error {
		ctl.Lose(dblock.ErrForceReleased)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, dblock.ErrForceReleased) || !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunReleasesAfterFn(t *testing.T) {
	t.Parallel()
	released := false
	l, _ := newLease(t, func(context.Context) error { released = true; return nil })
	fnErr := errors.New("boom")
	if err := mode.Run(context.Background(), l, time.Second, func(context.Context) error { return fnErr }); !errors.Is(err, fnErr) {
		t.Fatalf("Run = %v", err)
	}
	if !released {
		t.Fatal("not released after fn")
	}
}

// TestRunPanics: a panic in fn cancels fn's context and releases the lease
// before it goes on up the stack, unchanged.
func TestRunPanics(t *testing.T) {
	t.Parallel()
	var releases atomic.Int32
	l, _ := newLease(t, func(context.Context) error { releases.Add(1); return nil })
	var fnCtx context.Context
	boom := errors.New("boom")
	got := func() (r any) {
		defer func() { r = recover() }()
		_ = mode.Run(context.Background(), l, time.Second, func(ctx context.Context) error {
			fnCtx = ctx
			panic(boom)
		})
		return nil
	}()
	if got != boom {
		t.Fatalf("recovered %v, want fn's panic value", got)
	}
	if releases.Load() != 1 {
		t.Fatalf("release ran %d times after a panic, want 1", releases.Load())
	}
	if !errors.Is(l.Err(), dblock.ErrReleased) {
		t.Fatalf("Err after a panic = %v, want ErrReleased", l.Err())
	}
	if fnCtx.Err() == nil {
		t.Fatal("fn's context not cancelled after a panic")
	}
}

// TestLoseIfHeld: it ends a held lease as lost, and leaves alone a lease
// that is lost already or whose Release has begun.
func TestLoseIfHeld(t *testing.T) {
	t.Parallel()
	closed := errors.New("closed")
	l, ctl := newLease(t, func(context.Context) error { return nil })
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	if !ctl.LoseIfHeld(closed) {
		t.Fatal("LoseIfHeld did not end a held lease")
	}
	<-l.Done()
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, dblock.ErrLost) || !errors.Is(cause, closed) {
		t.Fatalf("context cause = %v, want ErrLost and the reason", cause)
	}
	if ctl.LoseIfHeld(closed) || ctl.Lose(dblock.ErrExpired) {
		t.Fatal("a lost lease was ended again")
	}
	if err := l.Release(context.Background()); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, closed) {
		t.Fatalf("release after LoseIfHeld = %v, want ErrLost and the reason", err)
	}
	// A second Release says both: released already, and lost.
	if err := l.Release(context.Background()); !errors.Is(err, dblock.ErrReleased) || !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("second release = %v, want ErrReleased and ErrLost", err)
	}

	// Release under way: LoseIfHeld leaves the lease to it.
	var ctl2 mode.Control
	var l2 *dblock.Lease
	l2, ctl2 = newLease(t, func(context.Context) error {
		if ctl2.LoseIfHeld(closed) {
			t.Error("LoseIfHeld ended a lease whose Release had begun")
		}
		return nil
	})
	if err := l2.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if !errors.Is(l2.Err(), dblock.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", l2.Err())
	}
}

// TestLeaseContexts: Lease.Context's contexts end with the loss (also one
// made after it), are left alone by a release, and start no goroutine.
func TestLeaseContexts(t *testing.T) {
	l, ctl := newLease(t, func(context.Context) error { return nil })
	before := runtime.NumGoroutine()
	ctxs := make([]context.Context, 100)
	for i := range ctxs {
		var cancel context.CancelFunc
		ctxs[i], cancel = l.Context(context.Background())
		defer cancel()
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("100 contexts of a lease run %d goroutines more", n-before)
	}
	stopped, stop := l.Context(context.Background())
	stop()
	ctl.Lose(dblock.ErrExpired)
	for _, ctx := range ctxs {
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, dblock.ErrLost) || !errors.Is(cause, dblock.ErrExpired) {
			t.Fatalf("context cause = %v, want the loss", cause)
		}
	}
	if cause := context.Cause(stopped); cause != context.Canceled {
		t.Fatalf("a context cancelled before the loss has cause %v, want context.Canceled", cause)
	}
	late, cancel := l.Context(context.Background())
	defer cancel()
	if cause := context.Cause(late); !errors.Is(cause, dblock.ErrExpired) {
		t.Fatalf("a context made after the loss has cause %v, want the loss", cause)
	}

	released, _ := newLease(t, func(context.Context) error { return nil })
	kept, cancelKept := released.Context(context.Background())
	defer cancelKept()
	if err := released.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	after, cancelAfter := released.Context(context.Background())
	defer cancelAfter()
	if kept.Err() != nil || after.Err() != nil {
		t.Fatalf("a release cancelled the lease's contexts: %v, %v", kept.Err(), after.Err())
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", strings.Repeat("x", 256), "a\x00b", string([]byte{0xff, 0xfe})} {
		if err := dblock.ValidateName(bad); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v", bad, err)
		}
	}
	for _, good := range []string{"a", strings.Repeat("x", 255), "invoice:42", "日本"} {
		if err := dblock.ValidateName(good); err != nil {
			t.Errorf("ValidateName(%q) = %v", good, err)
		}
	}
}

func TestResolveOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, err := mode.Resolve(ctx, nil)
	if err != nil || o.TTL != dblock.TTLDefault || o.MaxHold != 0 || o.Owner == "" || o.HasWait {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	o2, _ := mode.Resolve(ctx, nil)
	if o2.Owner == o.Owner {
		t.Fatal("two acquisitions share a default owner")
	}
	o, err = mode.Resolve(ctx, []dblock.Option{dblock.WithTTL(time.Second), dblock.WithWait(0)})
	if err != nil || !o.TTLSet || o.TTL != time.Second || !o.HasWait || o.Wait != 0 {
		t.Fatalf("explicit ttl: %+v %v", o, err)
	}
	o, err = mode.Resolve(ctx, []dblock.Option{dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Second)})
	if err != nil || o.TTL != time.Minute || o.MaxHold != time.Second || o.FirstTTL() != time.Second {
		t.Fatalf("max hold under the ttl: %+v %v", o, err)
	}
	o, err = mode.Resolve(dblock.ContextWithOwner(ctx, "me"), nil)
	if err != nil || o.Owner != "me" {
		t.Fatalf("context owner: %+v %v", o, err)
	}
	for _, bad := range [][]dblock.Option{
		{dblock.WithTTL(0)}, {dblock.WithTTL(-time.Second)}, {dblock.WithTTL(time.Microsecond)},
		{dblock.WithMaxHold(-time.Second)}, {dblock.WithMaxHold(time.Microsecond)}, {dblock.WithWait(-1)}, {dblock.WithOwner("a\x00")}, {dblock.WithMetadata(strings.Repeat("m", 2000))},
	} {
		if _, err := mode.Resolve(ctx, bad); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("bad options accepted: %v", err)
		}
	}
}

func TestHeldErrorMessage(t *testing.T) {
	t.Parallel()
	exp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := error(&dblock.HeldError{Name: "job", Owner: "host:1:abc", ExpiresAt: exp})
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatal("HeldError is not ErrNotAcquired")
	}
	want := `dblock: "job" not acquired: held by owner "host:1:abc" until 2026-01-02T03:04:05Z`
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	p := &dblock.HeldError{Name: "job", Mode: dblock.ModePessimistic}
	if !strings.Contains(p.Error(), "pessimistic transaction") {
		t.Fatalf("pessimistic holder message %q", p.Error())
	}
}
