package optimistic

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// TestReadFirstKeptName: a waiter that last saw the name kept for another
// waiter reads the row on its next wake-up, and sends the acquire
// statement only when the name may be its own: not while the name is free
// but kept for a waiter that began no later; yes once it takes the
// reservation over (having begun earlier), and once the reservation is
// gone.
func TestReadFirstKeptName(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const name = "kept"
		l := newGateLocker(t, iso)
		lease, err := l.TryAcquire(ctx, name, dblock.WithOwner("x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := iso.Store().ReserveLease(ctx, name, "b", h.Now, time.Minute); err != nil || !ok {
			t.Fatalf("reserve for b: %v %v", ok, err)
		}
		seen, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		a := &acquisition{l: l, ctx: ctx, waitCtx: ctx, name: name, o: mode.Options{Owner: "c"}, wait: true,
			since: h.Now.Add(time.Second), res: store.AcquireResult{Holder: seen}}

		if !a.keptFromMe() {
			t.Fatalf("a name reserved for b is not kept from c: %+v", seen)
		}
		if a.readFirst() || a.reserved {
			t.Fatalf("c, which began after b, asks for the name kept for b (reserved: %v)", a.reserved)
		}
		a.since = h.Now.Add(-time.Second)
		if !a.readFirst() || !a.reserved {
			t.Fatalf("c, which began before b, does not take the reservation over and ask (reserved: %v)", a.reserved)
		}
		if after, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || after.Next.Owner != "c" {
			t.Fatalf("the reservation after c took it over: %+v, %v", after.Next, err)
		}
		if a.keptFromMe() {
			t.Fatal("a name reserved for c is kept from c")
		}
		if ok, err := iso.Store().UnreserveLease(ctx, name, "c"); err != nil || !ok {
			t.Fatalf("unreserve: %v %v", ok, err)
		}
		a.reserved = false
		if !a.readFirst() {
			t.Fatal("c does not ask for a free name that nobody keeps")
		}
	})
}
