package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
	"github.com/dblock-go/dblock/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, locktest.LeakOptions()...) }

// hangGuard bounds every wait; a guard against hangs, not a timing assertion.
const hangGuard = time.Minute

type modeCase struct {
	mode  string
	lease bool // leases of a dblock_locks row: they renew and ForceRelease frees them under their holder
	open  func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker
}

// exclusiveSemaphore is a semaphore of one permit, as a dblock.Locker.
type exclusiveSemaphore struct{ *semaphore.Locker }

func (s exclusiveSemaphore) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return s.Locker.Acquire(ctx, name, 1, 1, opts...)
}

func (s exclusiveSemaphore) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return s.Locker.TryAcquire(ctx, name, 1, 1, opts...)
}

func (s exclusiveSemaphore) Do(ctx context.Context, name string, fn func(context.Context) error, opts ...dblock.Option) error {
	return s.Locker.Do(ctx, name, 1, 1, fn, opts...)
}

var modes = []modeCase{
	{dblock.ModeOptimistic, true, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := optimistic.New(iso.DB, &optimistic.Config{Telemetry: cfg})
		must(t, err)
		return l
	}},
	{dblock.ModeFair, true, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := fairqueue.New(iso.DB, &fairqueue.Config{Telemetry: cfg})
		must(t, err)
		return l
	}},
	{dblock.ModePessimistic, false, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := pessimistic.New(iso.DB, &pessimistic.Config{Telemetry: cfg})
		must(t, err)
		return l.AsLocker()
	}},
	{dblock.ModeWrite, true, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := rwlock.New(iso.DB, &rwlock.Config{Telemetry: cfg})
		must(t, err)
		return l
	}},
	{dblock.ModeSemaphore, false, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := semaphore.New(iso.DB, &semaphore.Config{Telemetry: cfg})
		must(t, err)
		return exclusiveSemaphore{l}
	}},
	// The fair options: the same outcomes, the wait in the queue recorded
	// with the mode's.
	{dblock.ModeWrite + "/fair", true, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := rwlock.New(iso.DB, &rwlock.Config{Telemetry: cfg, Fair: true})
		must(t, err)
		return l
	}},
	{dblock.ModeSemaphore + "/fair", false, func(t *testing.T, iso *dbtest.Isolated, cfg *telemetry.Config) dblock.Locker {
		l, err := semaphore.New(iso.DB, &semaphore.Config{Telemetry: cfg, Fair: true})
		must(t, err)
		return exclusiveSemaphore{l}
	}},
}

// attr is the mode attribute of m's instruments ("write" for "write/fair").
func (m modeCase) attr() string { return strings.TrimSuffix(m.mode, "/fair") }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// outcomeCheck is one mode on one database, with its SDK.
type outcomeCheck struct {
	t     *testing.T
	ctx   context.Context
	rig   *rig
	attrs []attribute.KeyValue // mode and dialect
	a, b  dblock.Locker        // two Lockers, as two processes
}

// want fails the check unless instrument name counts n with the mode's
// attributes and extra.
func (c *outcomeCheck) want(name string, n int64, extra ...attribute.KeyValue) {
	c.t.Helper()
	if got := c.rig.count(c.t, name, append(append([]attribute.KeyValue{}, c.attrs...), extra...)...); got != n {
		c.t.Errorf("%s %v: %d, want %d", name, extra, got, n)
	}
}

// eventually waits (bounded by ctx) until instrument name counts n with
// the mode's attributes and extra: a loss is recorded just after the
// lease's Done closes, on the goroutine that found it.
func (c *outcomeCheck) eventually(ctx context.Context, name string, n int64, extra ...attribute.KeyValue) {
	c.t.Helper()
	want := append(append([]attribute.KeyValue{}, c.attrs...), extra...)
	for c.rig.count(c.t, name, want...) != n {
		if ctx.Err() != nil {
			c.t.Fatalf("%s %v never reached %d", name, extra, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func outcome(o string) attribute.KeyValue { return attribute.String(telemetry.AttrOutcome, o) }

// TestOutcomes: every acquire outcome, the wait, the hold and a loss show
// in the metrics, with the mode and the dialect, on every mode and database.
func TestOutcomes(t *testing.T) {
	for _, m := range modes {
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				r := newRig(telemetry.NamesRaw)
				c := &outcomeCheck{t: t, ctx: ctx, rig: r, a: m.open(t, iso, r.cfg), b: m.open(t, iso, r.cfg),
					attrs: []attribute.KeyValue{attribute.String(telemetry.AttrMode, m.attr()),
						attribute.String(telemetry.AttrDialect, string(iso.Kind))}}
				defer c.a.Close()
				c.run(locktest.RandomName("otel"))
			})
		})
	}
}

func (c *outcomeCheck) run(name string) {
	t, ctx := c.t, c.ctx
	held, err := c.a.Acquire(ctx, name, dblock.WithToken())
	must(t, err)
	c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeAcquired))

	if _, err := c.b.TryAcquire(ctx, name, dblock.WithToken()); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v", err)
	}
	c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeBusy))

	cancelled, stop := context.WithCancel(ctx)
	stop()
	if _, err := c.b.Acquire(cancelled, name, dblock.WithToken()); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded on a held name")
	}
	c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeCanceled))

	if _, err := c.b.TryAcquire(ctx, ""); !errors.Is(err, dblock.ErrInvalidName) {
		t.Fatalf("TryAcquire of an empty name: %v", err)
	}
	c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeInvalid))

	waiter := c.waitBehind(held, name)
	c.want(telemetry.HoldDuration, 1, attribute.String(telemetry.AttrEnd, "released"))
	c.want(telemetry.Acquisitions, 2)
	c.want(telemetry.WaitDuration, 2)

	// Closing a Locker ends its leases and frees their rows: the hold
	// ends, and it is not counted as a loss (the hooks see no OnLost).
	must(t, c.b.Close())
	<-waiter.Done()
	c.want(telemetry.HoldDuration, 2)
	c.want(telemetry.Losses, 0)
	if _, err := c.b.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeClosed))
}

// TestLosses: a lease freed under its holder counts as a loss with its
// reason, and its hold ends as lost.
func TestLosses(t *testing.T) {
	for _, m := range modes {
		if !m.lease {
			continue // A pessimistic hold is a transaction: nobody frees its row under it.
		}
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				r := newRig(telemetry.NamesRaw)
				l := m.open(t, iso, r.cfg)
				defer l.Close()
				name := locktest.RandomName("otel-loss")
				lease, err := l.Acquire(ctx, name, dblock.WithTTL(300*time.Millisecond))
				must(t, err)
				if ok, err := iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
					t.Fatalf("force release: %v %v", ok, err)
				}
				select {
				case <-lease.Done():
				case <-ctx.Done():
					t.Fatal("the lease freed under its holder never ended")
				}
				c := &outcomeCheck{t: t, rig: r, attrs: []attribute.KeyValue{attribute.String(telemetry.AttrMode, m.attr()),
					attribute.String(telemetry.AttrDialect, string(iso.Kind))}}
				c.eventually(ctx, telemetry.HoldDuration, 1, attribute.String(telemetry.AttrEnd, "lost"))
				c.want(telemetry.Losses, 1, attribute.String(telemetry.AttrReason, telemetry.ReasonForceReleased))
			})
		})
	}
}

// waitBehind starts an Acquire by b on name, held by held, sees it counted
// as a waiter, releases held and returns the waiter's lease once it has it.
func (c *outcomeCheck) waitBehind(held *dblock.Lease, name string) *dblock.Lease {
	t := c.t
	type result struct {
		lease *dblock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.b.Acquire(c.ctx, name, dblock.WithToken())
		got <- result{l, err}
	}()
	for c.rig.count(t, telemetry.Waiters, c.attrs...) != 1 {
		if c.ctx.Err() != nil {
			t.Fatal("the waiting Acquire never counted as a waiter")
		}
		time.Sleep(time.Millisecond)
	}
	must(t, held.Release(c.ctx))
	res := <-got
	must(t, res.err)
	c.want(telemetry.Waiters, 0)
	return res.lease
}
