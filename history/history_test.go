package history_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/reaper"
)

func TestMain(m *testing.M) {
	childMain()
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

// hangGuard bounds every wait; a guard against hangs, not a timing assertion.
const hangGuard = time.Minute

// shortTTL is the lease of acquisitions left to expire.
const shortTTL = 100 * time.Millisecond

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// check is one database with history enabled.
type check struct {
	t   *testing.T
	ctx context.Context
	iso *dbtest.Isolated
	opt *optimistic.Locker
}

// newCheck enables the history on iso, or returns nil where the database
// keeps none, having checked that every call says so.
func newCheck(t *testing.T, iso *dbtest.Isolated) *check {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	if !iso.Store().HistorySupported() {
		refused(t, ctx, iso)
		return nil
	}
	must(t, history.Enable(ctx, iso.DB))
	must(t, history.Enable(ctx, iso.DB)) // again: nothing changes
	opt, err := optimistic.New(iso.DB, nil)
	must(t, err)
	t.Cleanup(func() { _ = opt.Close() })
	return &check{t: t, ctx: ctx, iso: iso, opt: opt}
}

// refused checks that a database without a history refuses every call
// with dblock.ErrInvalidOption, and says it is not enabled.
func refused(t *testing.T, ctx context.Context, iso *dbtest.Isolated) {
	t.Helper()
	if err := history.Enable(ctx, iso.DB); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("Enable on %s: %v, want ErrInvalidOption", iso.Kind, err)
	}
	if _, err := history.List(ctx, iso.DB, history.Query{}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("List on %s: %v, want ErrInvalidOption", iso.Kind, err)
	}
	if _, err := history.Prune(ctx, iso.DB, time.Hour); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("Prune on %s: %v, want ErrInvalidOption", iso.Kind, err)
	}
	if on, err := history.Enabled(ctx, iso.DB); on || err != nil {
		t.Errorf("Enabled on %s: %v %v, want false", iso.Kind, on, err)
	}
}

// only returns the one entry of name.
func (c *check) only(name string) history.Entry {
	c.t.Helper()
	es, err := history.List(c.ctx, c.iso.DB, history.Query{Name: name})
	must(c.t, err)
	if len(es) != 1 {
		c.t.Fatalf("%q: %d entries, want 1: %+v", name, len(es), es)
	}
	return es[0]
}

// want fails unless e ended how, for owner with token.
func (c *check) want(e history.Entry, how, owner string, token dblock.Token, mode string) {
	c.t.Helper()
	if e.Ended != how || e.Owner != owner || e.Token != token || e.Mode != mode {
		c.t.Errorf("%q: ended %q by %q token %d mode %q, want %q by %q token %d mode %q",
			e.Name, e.Ended, e.Owner, e.Token, e.Mode, how, owner, token, mode)
	}
	if e.AcquiredAt.IsZero() || e.EndedAt.Before(e.AcquiredAt) {
		c.t.Errorf("%q: acquired %v, ended %v", e.Name, e.AcquiredAt, e.EndedAt)
	}
}

// expire leaves name held by owner with an expired lease (by the database's
// clock): the max hold ends it without freeing the row.
func (c *check) expire(name, owner string) dblock.Token {
	c.t.Helper()
	lease, err := c.opt.Acquire(c.ctx, name, dblock.WithOwner(owner), dblock.WithTTL(shortTTL), dblock.WithMaxHold(shortTTL))
	must(c.t, err)
	<-lease.Done()
	c.iso.WaitExpired(c.t, c.ctx, name)
	return lease.Token()
}

// TestEveryEnd: every way a lease acquisition ends writes one entry that
// says how, and so does a pessimistic hold's commit or rollback; re-entries
// and renewals write none.
func TestEveryEnd(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		on, err := history.Enabled(c.ctx, iso.DB)
		if err != nil || !on {
			t.Fatalf("Enabled after Enable: %v %v", on, err)
		}
		c.released()
		c.expiredAndReaped()
		c.takenOver()
		c.forceReleased()
		c.fair()
		c.pessimistic()
		c.shared()
	})
}

func (c *check) released() {
	name := locktest.RandomName("released")
	outer, err := c.opt.Acquire(c.ctx, name, dblock.WithOwner("o1"), dblock.WithMetadata("job 7"))
	must(c.t, err)
	inner, err := c.opt.Acquire(c.ctx, name, dblock.WithOwner("o1"))
	must(c.t, err)
	must(c.t, inner.Release(c.ctx))
	if es, err := history.List(c.ctx, c.iso.DB, history.Query{Name: name}); err != nil || len(es) != 0 {
		c.t.Fatalf("after the inner release of a re-entered hold: %d entries (%v), want none", len(es), err)
	}
	must(c.t, outer.Release(c.ctx))
	e := c.only(name)
	c.want(e, history.Released, "o1", outer.Token(), dblock.ModeOptimistic)
	if e.Metadata != "job 7" {
		c.t.Errorf("metadata %q, want %q", e.Metadata, "job 7")
	}
}

func (c *check) expiredAndReaped() {
	name := locktest.RandomName("expired")
	token := c.expire(name, "o2")
	r, err := reaper.New(c.iso.DB, nil)
	must(c.t, err)
	_, err = r.RunOnce(c.ctx)
	must(c.t, err)
	c.want(c.only(name), history.Expired, "o2", token, dblock.ModeOptimistic)
}

func (c *check) takenOver() {
	name := locktest.RandomName("taken")
	token := c.expire(name, "o3")
	next, err := c.opt.TryAcquire(c.ctx, name, dblock.WithOwner("o4"))
	must(c.t, err)
	c.want(c.only(name), history.TakenOver, "o3", token, dblock.ModeOptimistic)
	must(c.t, next.Release(c.ctx))
}

func (c *check) forceReleased() {
	name := locktest.RandomName("forced")
	lease, err := c.opt.Acquire(c.ctx, name, dblock.WithOwner("o5"))
	must(c.t, err)
	if ok, err := c.iso.Store().ForceRelease(c.ctx, nil, name); err != nil || !ok {
		c.t.Fatalf("force release: %v %v", ok, err)
	}
	c.want(c.only(name), history.ForceReleased, "o5", lease.Token(), dblock.ModeOptimistic)
	_ = lease.Release(c.ctx) // lost: the release finds the row freed
}

func (c *check) fair() {
	l, err := fairqueue.New(c.iso.DB, nil)
	must(c.t, err)
	defer l.Close()
	name := locktest.RandomName("fair")
	lease, err := l.Acquire(c.ctx, name, dblock.WithOwner("o6"))
	must(c.t, err)
	must(c.t, lease.Release(c.ctx))
	c.want(c.only(name), history.Released, "o6", lease.Token(), dblock.ModeFair)
}
