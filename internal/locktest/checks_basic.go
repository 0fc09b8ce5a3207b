package locktest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
)

func checkExclusion(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("excl")
	const goroutines, rounds = 50, 2
	var inside, maxInside atomic.Int32
	var mu sync.Mutex
	var tokens []dblock.Token
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				lease, err := l.Acquire(ctx, name, opts()...)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("acquire/release: %v", err)
	}
	if m := maxInside.Load(); m != 1 {
		t.Fatalf("%d holders at once, want 1", m)
	}
	if len(tokens) != goroutines*rounds {
		t.Fatalf("%d acquisitions, want %d", len(tokens), goroutines*rounds)
	}
	if s.caps.Fencing {
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d after %d: tokens must increase in acquisition order", tokens[i], tokens[i-1])
			}
		}
	}
}

func checkReentrancy(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("reent")
	owner := dblock.NewOwner()
	l1 := mustAcquire(t, l, ctx, name, dblock.WithOwner(owner))
	l2, err := l.TryAcquire(ctx, name, opts(dblock.WithOwner(owner))...)
	if err != nil {
		t.Fatalf("re-enter with the same owner: %v", err)
	}
	if s.caps.Fencing && l2.Token() != l1.Token() {
		t.Errorf("reentrant token %d, want the holding token %d", l2.Token(), l1.Token())
	}
	// The same owner from another process (another pool) re-enters too.
	l3 := mustAcquire(t, other, ctx, name, dblock.WithOwner(owner))
	release(t, l3)
	release(t, l1)
	wantHeld(t, other, ctx, name)
	release(t, l2)
	wantFree(t, other, ctx, name)
	// The context owner re-enters as well.
	octx := dblock.ContextWithOwner(ctx, dblock.NewOwner())
	c1 := mustAcquire(t, l, octx, name)
	c2, err := l.TryAcquire(octx, name, opts()...)
	if err != nil {
		t.Fatalf("re-enter with the context's owner: %v", err)
	}
	release(t, c2)
	wantHeld(t, other, ctx, name)
	release(t, c1)
	wantFree(t, other, ctx, name)
}

func checkNotReentrantByAccident(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("accident")
	lease := mustAcquire(t, l, ctx, name)
	wantHeld(t, l, ctx, name) // Same Locker, same goroutine, no owner named: a fresh owner.
	release(t, lease)
}

func checkTryAcquire(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("try")
	lease := mustAcquire(t, l, ctx, name)
	// The holder keeps the name for as long as TryAcquire runs, so a
	// TryAcquire that waited would never return.
	_, err := other.TryAcquire(ctx, name, opts()...)
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v, want ErrNotAcquired", err)
	}
	var held *dblock.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire error %v carries no *dblock.HeldError", err)
	}
	if held.Name != name {
		t.Errorf("HeldError.Name %q, want %q", held.Name, name)
	}
	if s.caps.Lease && held.Owner != lease.Owner() {
		t.Errorf("HeldError.Owner %q, want the holder %q", held.Owner, lease.Owner())
	}
	// WithWait(0) on Acquire tries once as well.
	if _, err := other.Acquire(ctx, name, opts(dblock.WithWait(0))...); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("Acquire WithWait(0) of a held name: %v, want ErrNotAcquired", err)
	}
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkOwnerOnlyRelease(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("owner")
	lease := mustAcquire(t, l, ctx, name, dblock.WithOwner("owner-a"))
	// Another owner's acquisitions and releases leave the holder alone.
	for i := 0; i < 3; i++ {
		if b, err := other.TryAcquire(ctx, name, opts(dblock.WithOwner("owner-b"))...); err == nil {
			_ = b.Release(ctx)
			t.Fatalf("owner-b acquired a name owner-a holds")
		}
	}
	b := mustAcquire(t, other, ctx, RandomName("owner-other"), dblock.WithOwner("owner-b"))
	release(t, b)
	if err := lease.Err(); err != nil {
		t.Fatalf("owner-a's lease: %v", err)
	}
	wantHeld(t, other, ctx, name)
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkFencing(t *testing.T, s *suite) {
	lockers := []dblock.Locker{s.locker(), s.otherLocker()}
	ctx, name := s.ctx(), RandomName("fence")
	var last dblock.Token
	for i := 0; i < 20; i++ {
		lease := mustAcquire(t, lockers[i%2], ctx, name)
		if lease.Token() <= last {
			t.Fatalf("acquisition %d: token %d, want > %d", i, lease.Token(), last)
		}
		last = lease.Token()
		release(t, lease)
	}
}

// call runs f in a goroutine and fails if it does not return within the hang guard.
func call[T any](t *testing.T, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("call did not return")
		panic("unreachable")
	}
}

func checkCancelWhileWaiting(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("cancel")
	lease := mustAcquire(t, l, ctx, name)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := call(t, func() error { _, err := other.Acquire(dctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until a deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}

	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	err = call(t, func() error { _, err := other.Acquire(cctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire until cancelled: %v, want ErrNotAcquired and context.Canceled", err)
	}

	// Already cancelled: no wait at all.
	err = call(t, func() error { _, err := other.Acquire(cctx, name, opts()...); return err })
	if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v, want ErrNotAcquired and context.Canceled", err)
	}

	// The waiters left nothing behind.
	if _, _, n := s.env.Residue(t); n != 0 {
		t.Errorf("%d waiter rows left after cancelled waits", n)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("holder's lease: %v", err)
	}
	release(t, lease)
	wantFree(t, other, ctx, name)
}

func checkWaitOption(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("wait")
	lease := mustAcquire(t, l, ctx, name)
	err := call(t, func() error {
		_, err := other.Acquire(ctx, name, opts(dblock.WithWait(150*time.Millisecond))...)
		return err
	})
	if !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("Acquire WithWait on a held name: %v, want ErrNotAcquired", err)
	}
	// A waiter succeeds once the holder releases.
	got := make(chan error, 1)
	go func() {
		w, err := other.Acquire(ctx, name, opts(dblock.WithWait(hangGuard))...)
		if err == nil {
			err = w.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	release(t, lease)
	if err := call(t, func() error { return <-got }); err != nil {
		t.Fatalf("waiter after release: %v", err)
	}
	if _, _, n := s.env.Residue(t); n != 0 {
		t.Errorf("%d waiter rows left", n)
	}
}

func checkBadInput(t *testing.T, s *suite) {
	l, ctx := s.locker(), s.ctx()
	badNames := map[string]string{
		"empty":    "",
		"256bytes": strings.Repeat("n", 256),
		"utf8":     "bad\xffname",
		"nul":      "a\x00b",
	}
	for label, name := range badNames {
		if _, err := l.TryAcquire(ctx, name, opts()...); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("TryAcquire(%s): %v, want ErrInvalidName", label, err)
		}
		if _, err := l.Acquire(ctx, name, opts()...); !errors.Is(err, dblock.ErrInvalidName) {
			t.Errorf("Acquire(%s): %v, want ErrInvalidName", label, err)
		}
		ran := false
		if err := l.Do(ctx, name, func(context.Context) error { ran = true; return nil }, opts()...); !errors.Is(err, dblock.ErrInvalidName) || ran {
			t.Errorf("Do(%s): %v (fn ran: %v), want ErrInvalidName and fn not run", label, err, ran)
		}
	}
	// 255 bytes is the longest valid name.
	lease := mustAcquire(t, l, ctx, strings.Repeat("n", 255))
	release(t, lease)
	badOpts := map[string]dblock.Option{
		"ttl0":        dblock.WithTTL(0),
		"ttlNegative": dblock.WithTTL(-time.Second),
		"ttlTooShort": dblock.WithTTL(time.Microsecond),
		"ownerUTF8":   dblock.WithOwner("bad\xffowner"),
		"ownerNUL":    dblock.WithOwner("a\x00b"),
		"ownerLong":   dblock.WithOwner(strings.Repeat("o", 256)),
		"waitNeg":     dblock.WithWait(-time.Second),
	}
	for label, o := range badOpts {
		name := RandomName("bad-" + label)
		if _, err := l.TryAcquire(ctx, name, opts(o)...); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("TryAcquire with %s: %v, want ErrInvalidOption", label, err)
		}
		if _, err := l.Acquire(ctx, name, opts(o)...); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("Acquire with %s: %v, want ErrInvalidOption", label, err)
		}
	}
	// Nothing was written for any refused call (the one valid name's row aside).
	names, held, waiters := s.env.Residue(t)
	if names > 1 {
		t.Errorf("%d rows in dblock_locks after refused calls, want at most the valid name's", names)
	}
	if held != 0 {
		t.Errorf("%d held rows after refused calls", held)
	}
	if waiters != 0 {
		t.Errorf("%d rows in dblock_waiters after refused calls", waiters)
	}
}

func checkReleaseTwice(t *testing.T, s *suite) {
	l, ctx, name := s.locker(), s.ctx(), RandomName("twice")
	lease := mustAcquire(t, l, ctx, name)
	release(t, lease)
	if err := lease.Release(ctx); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("second Release: %v, want ErrReleased", err)
	}
	if err := lease.Err(); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatalf("Done not closed after Release")
	}
}

func checkDo(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("do")
	sentinel := errors.New("fn failed")
	err := l.Do(ctx, name, func(fctx context.Context) error {
		wantHeld(t, other, ctx, name)
		return sentinel
	}, opts()...)
	if !errors.Is(err, sentinel) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	wantFree(t, other, ctx, name)
	ran := false
	if err := l.Do(ctx, name, func(context.Context) error { ran = true; return nil }, opts()...); err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	wantFree(t, other, ctx, name)
}

// doUntilCancelled starts l.Do on name with an fn that waits for its
// context to end, and returns once fn runs: fnCause receives the cause of
// that context's end (nil if it did not end within hangGuard), doErr what
// Do returned.
func doUntilCancelled(t *testing.T, ctx context.Context, l dblock.Locker, name string) (fnCause, doErr chan error) {
	t.Helper()
	fnRunning := make(chan struct{})
	fnCause, doErr = make(chan error, 1), make(chan error, 1)
	go func() {
		doErr <- l.Do(ctx, name, func(fctx context.Context) error {
			close(fnRunning)
			select {
			case <-fctx.Done():
				fnCause <- context.Cause(fctx)
				return fctx.Err()
			case <-time.After(hangGuard):
				fnCause <- nil
				return errors.New("fn's context was not cancelled by Close")
			}
		}, opts()...)
	}()
	select {
	case <-fnRunning:
	case err := <-doErr:
		t.Fatalf("Do returned before fn ran: %v", err)
	case <-time.After(hangGuard):
		t.Fatalf("Do's fn did not start")
	}
	return fnCause, doErr
}

func checkClose(t *testing.T, s *suite) {
	ctx := s.ctx()
	l := s.env.Locker(t, false)
	other := s.otherLocker()
	a, b, busy := RandomName("close-a"), RandomName("close-b"), RandomName("close-busy")
	la := mustAcquire(t, l, ctx, a)
	lb := mustAcquire(t, l, ctx, b, dblock.WithTTL(time.Minute))
	released := mustAcquire(t, l, ctx, RandomName("close-released"))
	release(t, released)
	holder := mustAcquire(t, other, ctx, busy)
	waiter := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, busy, opts()...)
		waiter <- err
	}()
	// A Do whose fn runs while Close runs: Close must tell fn (cancel its
	// context) that the lock is gone, not free the name under it silently.
	doName := RandomName("close-do")
	fnCause, doErr := doUntilCancelled(t, ctx, l, doName)
	time.Sleep(100 * time.Millisecond)
	if err := call(t, l.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := call(t, func() error { return <-waiter }); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("waiter ended by Close: %v, want ErrNotAcquired", err)
	}
	if cause := call(t, func() error { return <-fnCause }); !errors.Is(cause, dblock.ErrLost) {
		t.Fatalf("cause of the cancellation of a Do's fn by Close: %v, want ErrLost", cause)
	}
	if err := call(t, func() error { return <-doErr }); !errors.Is(err, dblock.ErrLost) {
		t.Fatalf("Do ended by Close: %v, want ErrLost", err)
	}
	wantFree(t, other, ctx, doName)
	for _, lease := range []*dblock.Lease{la, lb} {
		select {
		case <-lease.Done():
		default:
			t.Errorf("lease %q still open after Close", lease.Name())
		}
		if err := lease.Err(); !errors.Is(err, dblock.ErrLost) {
			t.Errorf("lease %q after Close: Err %v, want ErrLost (the holder did not release it)", lease.Name(), err)
		}
	}
	wantFree(t, other, ctx, a)
	wantFree(t, other, ctx, b)
	if _, err := l.TryAcquire(ctx, RandomName("after-close"), opts()...); err == nil {
		t.Errorf("TryAcquire after Close succeeded")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := s.env.InUse(); n != 0 {
		t.Errorf("%d connections in use after Close", n)
	}
	release(t, holder)
}

func checkDoPanics(t *testing.T, s *suite) {
	l, other, ctx, name := s.locker(), s.otherLocker(), s.ctx(), RandomName("dopanic")
	type boom struct{}
	var fnCtx context.Context
	got := func() (r any) {
		defer func() { r = recover() }()
		_ = l.Do(ctx, name, func(fctx context.Context) error {
			fnCtx = fctx
			panic(boom{})
		}, opts()...)
		return nil
	}()
	if _, ok := got.(boom); !ok {
		t.Fatalf("recovered %v from Do, want fn's panic value", got)
	}
	if fnCtx == nil || fnCtx.Err() == nil {
		t.Errorf("fn's context not cancelled after fn panicked")
	}
	// The panic did not leave the name held (nor, for a lease, renewed).
	wantFree(t, other, ctx, name)
}
