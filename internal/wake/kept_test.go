package wake_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
)

// TestKeptRelease: PostgreSQL's lease release announces a name that a live
// reservation keeps for another owner to that owner alone, and returns it
// (KeptAtRelease, read once); a quiet release of a name nobody keeps
// announces nothing, a plain one announces it to everyone; a reservation
// of a name found free announces it to the reserver. A notice is read as
// every name it could be, so a name holding the separator wakes too many
// subscribers, never too few.
func TestKeptRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newKeptEnv(t)
	db := e.iso.Store()

	token := e.take("o")
	if ok, err := db.ReserveLease(ctx, e.name, "w1", time.Now(), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for w1: %v %v", ok, err)
	}
	if w1, w2, all := e.woken(); w1 || w2 || all {
		t.Fatalf("a reservation of a held name woke w1 %v, w2 %v, all %v", w1, w2, all)
	}
	if ok, err := db.ReleaseLease(ctx, nil, e.name, "o", token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if kept, again := db.KeptAtRelease(e.name), db.KeptAtRelease(e.name); kept != "w1" || again != "" {
		t.Fatalf("kept at release: %q, then %q; want w1, then nothing", kept, again)
	}
	if w1, w2, all := e.woken(); !w1 || w2 || !all {
		t.Fatalf("a release kept for w1 woke w1 %v, w2 %v, all %v; want w1 and all", w1, w2, all)
	}

	if ok, err := db.UnreserveLease(ctx, e.name, "w1"); err != nil || !ok {
		t.Fatalf("unreserve: %v %v", ok, err)
	}
	e.woken() // Giving the reservation up announces the free name.
	token = e.take("o")
	if ok, err := db.ReleaseLeaseQuiet(ctx, e.name, "o", token); err != nil || !ok {
		t.Fatalf("quiet release: %v %v", ok, err)
	}
	if w1, w2, all := e.woken(); w1 || w2 || all || db.KeptAtRelease(e.name) != "" {
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
	longCh, cancel := e.hub.Subscribe(long)
	defer cancel()
	if _, err := e.iso.DB.SQL().ExecContext(ctx, "SELECT pg_notify($1, $2)", store.NotifyChannel, long); err != nil {
		t.Fatal(err)
	}
	w1, w2, all := e.woken()
	if own := drained(longCh); !w1 || w2 || !all || !own {
		t.Fatalf("a notice of %q woke w1 %v, w2 %v, all %v, its own subscriber %v; want all but w2", long, w1, w2, all, own)
	}
}

// keptEnv is a hub over PostgreSQL with subscribers of one name: w1's,
// w2's and one for every owner, and a barrier name whose release, once
// its subscriber wakes, proves that every notice sent before was handled
// (one connection delivers the notices in order).
type keptEnv struct {
	t                *testing.T
	iso              *dbtest.Isolated
	hub              *wake.Hub
	name, barrier    string
	w1, w2, all, bar <-chan struct{}
}

func newKeptEnv(t *testing.T) *keptEnv {
	iso := dbtest.New(t, store.Postgres)
	hub := wake.New(iso.Store(), nil)
	e := &keptEnv{t: t, iso: iso, hub: hub, name: locktest.RandomName("kept"), barrier: locktest.RandomName("barrier")}
	// The hub's first connection wakes the subscribers made before it:
	// the barrier's alone, so that the others start empty.
	var cancels [4]func()
	e.bar, cancels[0] = hub.Subscribe(e.barrier)
	wait(t, e.bar, "first connection")
	e.w1, cancels[1] = hub.SubscribeFor(e.name, "w1")
	e.w2, cancels[2] = hub.SubscribeFor(e.name, "w2")
	e.all, cancels[3] = hub.Subscribe(e.name)
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		_ = hub.Close()
	})
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

// woken reports, after a barrier, which of w1, w2 and all were woken.
func (e *keptEnv) woken() (w1, w2, all bool) {
	e.t.Helper()
	release(e.t, e.iso.DB, e.barrier)
	wait(e.t, e.bar, "barrier")
	return drained(e.w1), drained(e.w2), drained(e.all)
}

// drained reports whether ch held a wake-up, and empties it.
func drained(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
