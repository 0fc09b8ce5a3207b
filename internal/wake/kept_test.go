package wake_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestKeptRelease: PostgreSQL's lease release announces a name that a live
// reservation keeps for another owner to that owner alone, and returns it
// (ReleaseLeaseKept); a quiet release of a name nobody keeps
// announces nothing, a plain one announces it to everyone; a reservation
// of a name found free announces it to the reserver. A notice is read as
// every name it could be, so a name holding the separator wakes too many
// subscribers, never too few.
func TestKeptRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newKeptEnv(t)
	db := e.iso.Store()
	hub := e.notices.Hub

	token := e.take("o")
	if ok, err := db.ReserveLease(ctx, e.name, "w1", time.Now(), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for w1: %v %v", ok, err)
	}
	if w1, w2, all := e.woken(); w1 || w2 || all {
		t.Fatalf("a reservation of a held name woke w1 %v, w2 %v, all %v", w1, w2, all)
	}
	if ok, kept, err := db.ReleaseLeaseKept(ctx, e.name, "o", token, false); err != nil || !ok || kept != "w1" {
		t.Fatalf("release: %v, kept for %q, %v; want kept for w1", ok, kept, err)
	}
	if w1, w2, all := e.woken(); !w1 || w2 || !all {
		t.Fatalf("a release kept for w1 woke w1 %v, w2 %v, all %v; want w1 and all", w1, w2, all)
	}

	if ok, err := db.UnreserveLease(ctx, e.name, "w1"); err != nil || !ok {
		t.Fatalf("unreserve: %v %v", ok, err)
	}
	e.woken() // Giving the reservation up announces the free name.
	token = e.take("o")
	ok, kept, err := db.ReleaseLeaseKept(ctx, e.name, "o", token, true)
	if err != nil || !ok || kept != "" {
		t.Fatalf("quiet release: %v, kept for %q, %v; want kept for nobody", ok, kept, err)
	}
	if w1, w2, all := e.woken(); w1 || w2 || all {
		t.Fatalf("a quiet release of a name nobody keeps woke w1 %v, w2 %v, all %v", w1, w2, all)
	}

	if ok, err := db.ReserveLease(ctx, e.name, "w2", time.Now(), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for w2: %v %v", ok, err)
	}
	if w1, w2, all := e.woken(); w1 || !w2 || !all {
		t.Fatalf("a reservation of a free name woke w1 %v, w2 %v, all %v; want w2 and all", w1, w2, all)
	}

	// A notice for w2 by hand; then the name + separator + "w1", both a
	// name of its own and (name, w1).
	if _, err := e.iso.DB.SQL().ExecContext(ctx, "SELECT pg_notify($1, $2)", store.NotifyChannel, e.name+string(store.NoticeSep)+"w2"); err != nil {
		t.Fatal(err)
	}
	if w1, w2, all := e.woken(); w1 || !w2 || !all {
		t.Fatalf("a notice for w2 woke w1 %v, w2 %v, all %v; want w2 and all", w1, w2, all)
	}
	long := e.name + string(store.NoticeSep) + "w1"
	longCh, cancel := hub.Subscribe(ctx, long)
	defer cancel()
	if _, err := e.iso.DB.SQL().ExecContext(ctx, "SELECT pg_notify($1, $2)", store.NotifyChannel, long); err != nil {
		t.Fatal(err)
	}
	w1, w2, all := e.woken()
	if own := dbtest.Woken(longCh); !w1 || w2 || !all || !own {
		t.Fatalf("a notice of %q woke w1 %v, w2 %v, all %v, its own subscriber %v; want all but w2", long, w1, w2, all, own)
	}
}

// keptEnv watches one name's notices for w1, w2 and every owner.
type keptEnv struct {
	t           *testing.T
	iso         *dbtest.Isolated
	notices     *dbtest.Notices
	name        string
	w1, w2, all <-chan struct{}
}

func newKeptEnv(t *testing.T) *keptEnv {
	iso := dbtest.New(t, store.Postgres)
	n := dbtest.NewNotices(t, iso, locktest.RandomName("barrier"))
	e := &keptEnv{t: t, iso: iso, notices: n, name: locktest.RandomName("kept")}
	// The row exists, as a waiter finds it, so that the subscriptions mark
	// it as listened for.
	if ok, err := iso.Store().ReleaseLease(context.Background(), nil, e.name, "setup", e.take("setup")); err != nil || !ok {
		t.Fatalf("setup release: %v %v", ok, err)
	}
	e.w1, e.w2, e.all = n.Subscribe(e.name, "w1"), n.Subscribe(e.name, "w2"), n.Subscribe(e.name, "")
	return e
}

// take acquires the name for owner.
func (e *keptEnv) take(owner string) dblock.Token {
	e.t.Helper()
	r, err := e.iso.Store().AcquireLease(context.Background(), nil, store.AcquireParams{Name: e.name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !r.Acquired {
		e.t.Fatalf("acquire: %+v %v", r, err)
	}
	return r.Token
}

// woken reports, once the notices sent so far are handled, which of w1,
// w2 and all they woke.
func (e *keptEnv) woken() (w1, w2, all bool) {
	e.t.Helper()
	e.notices.Settle()
	return dbtest.Woken(e.w1), dbtest.Woken(e.w2), dbtest.Woken(e.all)
}
