package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// reservations drives one name's reservation through the store, checking
// each step's result.
type reservations struct {
	t    *testing.T
	ctx  context.Context
	db   *store.DB
	name string
}

func (r reservations) acquire(owner string, ttl time.Duration) store.AcquireResult {
	r.t.Helper()
	res, err := r.db.AcquireLease(r.ctx, nil, store.AcquireParams{Name: r.name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
	if err != nil {
		r.t.Fatalf("acquire by %s: %v", owner, err)
	}
	return res
}

func (r reservations) reserve(owner string, since time.Time, d time.Duration, want bool) {
	r.t.Helper()
	ok, err := r.db.ReserveLease(r.ctx, r.name, owner, since, d)
	if err != nil || ok != want {
		r.t.Fatalf("reserve by %s since %v: %v, %v; want %v", owner, since, ok, err, want)
	}
}

func (r reservations) release(owner string, token dblock.Token) {
	r.t.Helper()
	if ok, err := r.db.ReleaseLease(r.ctx, nil, r.name, owner, token); err != nil || !ok {
		r.t.Fatalf("release by %s: %v, %v", owner, ok, err)
	}
}

func (r reservations) holder() store.Holder {
	r.t.Helper()
	h, err := r.db.LeaseHolder(r.ctx, nil, r.name)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// refused checks that owner's acquisition is refused because the name is
// kept for next, not held.
func (r reservations) refused(owner, next string) {
	r.t.Helper()
	res := r.acquire(owner, time.Minute)
	if res.Acquired || res.Holder.Next.Owner != next || !res.Holder.ReservedFor(owner) || res.Holder.Mode == dblock.ModePessimistic {
		r.t.Fatalf("acquire by %s of a name kept for %s: %+v", owner, next, res)
	}
}

// untilLapsed waits, by the database clock, for the reservation to lapse.
func (r reservations) untilLapsed() {
	r.t.Helper()
	for i := 0; i < 200; i++ {
		if h := r.holder(); !h.Next.Until.After(h.Now) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatal("the reservation did not lapse")
}

// TestReservations checks the reservation rules of every acquire statement:
// a free or expired name is kept for the reserving owner (one statement or
// several in a transaction), a holder's re-entry is not, an earlier waiter
// takes the reservation over and a later one does not, the reserver's take
// clears it, and it ends when it lapses or is given up. Then again with
// the history's trigger on dblock_locks, under which MariaDB's acquisitions
// read the row they leave (RETURNING).
func TestReservations(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		reservationRules(reservations{t: t, ctx: ctx, db: iso.Store(), name: "reserved"})
		if !iso.Store().HistorySupported() {
			return
		}
		if err := iso.Store().EnableHistory(ctx); err != nil {
			t.Fatal(err)
		}
		reservationRules(reservations{t: t, ctx: ctx, db: iso.Store(), name: "reserved-history"})
	})
}

// reservationRules is TestReservations on one name.
func reservationRules(r reservations) {
	t := r.t
	first := r.acquire("o1", time.Minute)
	refused := r.acquire("o2", time.Minute)
	if !first.Acquired || refused.Acquired || refused.Holder.Next.Owner != "" {
		t.Fatalf("acquisitions: %+v then %+v", first, refused)
	}
	since := refused.Holder.Now
	r.reserve("o2", since, 10*time.Second, true)
	r.reserve("o3", since.Add(time.Millisecond), 10*time.Second, false)
	r.reserve("o4", since.Add(-time.Second), 10*time.Second, true)
	r.reserve("o2", since, 10*time.Second, false)
	if h := r.holder(); h.Next.Owner != "o4" || !h.Next.Since.Equal(since.Add(-time.Second)) || !h.Next.Until.After(h.Now) {
		t.Fatalf("holder after the takeover: %+v", h)
	}
	if rows, err := r.db.ListLocks(r.ctx, []string{r.name}); err != nil || len(rows) != 1 || rows[0].Next.Owner != "o4" || !rows[0].Reserved() ||
		!rows[0].Next.Since.Equal(since.Add(-time.Second)) {
		t.Fatalf("status listing of a reserved name: %+v, %v", rows, err)
	}
	if again := r.acquire("o1", time.Minute); !again.Acquired || again.Token != first.Token {
		t.Fatalf("re-entry of the holder while reserved: %+v", again)
	}
	r.release("o1", first.Token)
	r.release("o1", first.Token)
	r.listed("o4")

	r.refused("o3", "o4")
	if _, blocked, err := r.db.AcquireLeases(r.ctx, []store.AcquireParams{{Name: r.name, Owner: "o3", Mode: dblock.ModeOptimistic, TTL: time.Minute}}); err != nil || blocked != 0 {
		t.Fatalf("a transaction's acquisition of a kept name: blocked %d, %v", blocked, err)
	}
	taken := r.acquire("o4", time.Minute)
	if !taken.Acquired || taken.Token <= first.Token {
		t.Fatalf("the reserver's acquisition: %+v after token %d", taken, first.Token)
	}
	if h := r.holder(); h.Next.Owner != "" {
		t.Fatalf("the reservation outlived the reserver's take: %+v", h)
	}
	r.release("o4", taken.Token)
	r.listed("")

	r.reserve("o2", since, 300*time.Millisecond, true)
	r.refused("o3", "o2")
	r.untilLapsed()
	lapsed := r.acquire("o3", time.Minute)
	if !lapsed.Acquired || r.holder().Next.Owner != "" {
		t.Fatalf("acquisition after the reservation lapsed: %+v", lapsed)
	}
	r.release("o3", lapsed.Token)
	readersKept(r, since)

	r.reserve("o2", since, 10*time.Second, true)
	if ok, err := r.db.UnreserveLease(r.ctx, r.name, "o3"); err != nil || ok {
		t.Fatalf("unreserve by another owner: %v, %v", ok, err)
	}
	if ok, err := r.db.UnreserveLease(r.ctx, r.name, "o2"); err != nil || !ok {
		t.Fatalf("unreserve: %v, %v", ok, err)
	}
	short := r.acquire("o5", 200*time.Millisecond)
	if !short.Acquired {
		t.Fatalf("acquisition after the reservation was given up: %+v", short)
	}
	expiredKept(r, short)
}

// expiredKept: an owner whose lease expired does not take the name back
// past another's reservation; the reserver takes it with a new token.
func expiredKept(r reservations, short store.AcquireResult) {
	t := r.t
	r.reserve("o6", r.holder().Now, 10*time.Second, true)
	for i := 0; i < 200; i++ {
		if h := r.holder(); !h.ExpiresAt.After(h.Now) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.refused("o5", "o6")
	if h := r.holder(); h.Owner != "o5" || h.Version != int64(short.Token) {
		t.Fatalf("the refused owner changed its expired row: %+v", h)
	}
	taken := r.acquire("o6", time.Minute)
	if !taken.Acquired || taken.Token <= short.Token {
		t.Fatalf("the reserver's takeover of an expired lease: %+v after token %d", taken, short.Token)
	}
}

// readersKept: a reader does not start a readers' period on a name kept
// for another owner; the reserver's own read does, and ends the
// reservation.
func readersKept(r reservations, since time.Time) {
	t := r.t
	r.reserve("o2", since, 10*time.Second, true)
	read := func(owner string) store.ShareResult {
		t.Helper()
		res, err := r.db.AcquireShare(r.ctx, store.ShareParams{Name: r.name, Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatalf("read by %s: %v", owner, err)
		}
		return res
	}
	if res := read("o3"); res.Acquired || !errors.Is(res.Holder.Reason, store.ErrReserved) || res.Holder.Next.Owner != "o2" ||
		!res.Holder.Next.Until.After(res.Holder.Now) || res.Holder.Held() {
		t.Fatalf("read by o3 of a name kept for o2: %+v", res)
	}
	res := read("o2")
	if !res.Acquired {
		t.Fatalf("the reserver's read: %+v", res)
	}
	if h := r.holder(); h.Next.Owner != "" || h.Mode != dblock.ModeRead {
		t.Fatalf("the reservation outlived the reserver's read: %+v", h)
	}
	if ok, err := r.db.ReleaseShare(r.ctx, r.name, "o2", res.Token); err != nil || !ok {
		t.Fatalf("the reserver's read release: %v, %v", ok, err)
	}
	if h := r.holder(); h.Held() {
		t.Fatalf("the name after its only reader left: %+v", h)
	}
}

// listed checks the status listings of the name: never among the held
// locks (it is free here), and among the reserved names for next, or not
// at all when next is empty.
func (r reservations) listed(next string) {
	r.t.Helper()
	held, err := r.db.ListLocks(r.ctx, []string{r.name})
	if err != nil || len(held) != 0 {
		r.t.Fatalf("held locks listed for a free name: %+v, %v", held, err)
	}
	kept, err := r.db.ListReserved(r.ctx, []string{r.name})
	switch {
	case err != nil:
		r.t.Fatalf("ListReserved: %v", err)
	case next == "" && len(kept) != 0:
		r.t.Fatalf("reserved names listed with no live reservation: %+v", kept)
	case next != "" && (len(kept) != 1 || kept[0].Name != r.name || kept[0].Owner != "" || kept[0].Next.Owner != next || !kept[0].Reserved()):
		r.t.Fatalf("reserved names: %+v, want %s kept for %s", kept, r.name, next)
	}
}
