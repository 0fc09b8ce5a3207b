package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestTakeHead: where a waiter's take is one statement (PostgreSQL, and
// MariaDB's procedure), it takes the lock and deletes the waiter's row
// together; it takes nothing for a dead or missing waiter, and while the
// lock is held it refuses, naming the holder, and leaves the waiter queued;
// the holder's own waiter re-enters; a row a transaction holds is a refusal
// at once, never a wait. Elsewhere it refuses.
func TestTakeHead(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		const name = "take-head"
		p := func(owner string) store.AcquireParams {
			return store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeFair, TTL: time.Minute}
		}
		if !db.TakesHeadInOne() {
			// A take there is a transaction of AcquireLease and TakeWaiter
			// (the fairqueue suite's); TakeHead refuses and changes nothing.
			w, err := db.Enqueue(ctx, nil, name, "a", store.WaitExclusive, time.Minute)
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if res, _, err := db.TakeHead(ctx, p("a"), w.ID); err == nil || res.Acquired {
				t.Fatalf("TakeHead on %s: %+v %v, want a refusal", iso.Kind, res, err)
			}
			if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
				t.Fatalf("the name after a refused TakeHead: %+v %v", h, err)
			}
			return
		}
		enqueue := func(owner string, timeout time.Duration) int64 {
			t.Helper()
			w, err := db.Enqueue(ctx, nil, name, owner, store.WaitExclusive, timeout)
			if err != nil {
				t.Fatalf("enqueue %s: %v", owner, err)
			}
			return w.ID
		}
		live := func(id int64) bool {
			t.Helper()
			s, err := db.CheckWaiter(ctx, nil, name, id)
			if err != nil {
				t.Fatalf("check %d: %v", id, err)
			}
			return s.Live
		}

		// A dead waiter (its heartbeat deadline passed) takes nothing, on a
		// free name whose row does not exist yet too.
		dead := enqueue("dead", time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		if res, ok, err := db.TakeHead(ctx, p("dead"), dead); err != nil || ok || res.Acquired {
			t.Fatalf("take by a dead waiter: %+v live=%v %v", res, ok, err)
		}
		if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
			t.Fatalf("the name after a dead waiter's take: %+v %v", h, err)
		}

		// A waiter behind a live one takes nothing, on a name without a
		// row too, and stays queued.
		ahead := enqueue("ahead", time.Minute)
		behind := enqueue("behind", time.Minute)
		if res, ok, err := db.TakeHead(ctx, p("behind"), behind); err != nil || !ok || res.Acquired {
			t.Fatalf("take by a waiter behind another, no row: %+v live=%v %v", res, ok, err)
		}
		if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Held() || !live(behind) {
			t.Fatalf("the name after a refused take behind another: %+v %v (queued: %v)", h, err, live(behind))
		}
		for _, id := range []int64{ahead, behind} {
			if _, err := db.LeaveQueue(ctx, nil, id); err != nil {
				t.Fatalf("leave %d: %v", id, err)
			}
		}

		// A live waiter takes the free name, and its row goes with the take.
		a := enqueue("a", time.Minute)
		res, ok, err := db.TakeHead(ctx, p("a"), a)
		if err != nil || !ok || !res.Acquired || res.Token == 0 {
			t.Fatalf("take by a: %+v live=%v %v", res, ok, err)
		}
		if live(a) {
			t.Fatal("a's row is still queued after its take")
		}

		// While a holds, b is refused with a as the holder and stays queued.
		b := enqueue("b", time.Minute)
		refused, ok, err := db.TakeHead(ctx, p("b"), b)
		if err != nil || !ok || refused.Acquired || refused.Holder.Owner != "a" || refused.Holder.Version != int64(res.Token) {
			t.Fatalf("take by b while a holds: %+v live=%v %v", refused, ok, err)
		}
		if !live(b) {
			t.Fatal("b's row left the queue on a refused take")
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "a", res.Token); err != nil || !ok {
			t.Fatalf("release a: %v %v", ok, err)
		}
		next, ok, err := db.TakeHead(ctx, p("b"), b)
		if err != nil || !ok || !next.Acquired || next.Token <= res.Token || live(b) {
			t.Fatalf("take by b after a's release: %+v live=%v %v (b queued: %v)", next, ok, err, live(b))
		}

		// A waiter with a live one ahead of it takes nothing on a free name
		// and stays queued, however stale the check that called it first.
		if ok, err := db.ReleaseLease(ctx, nil, name, "b", next.Token); err != nil || !ok {
			t.Fatalf("release b: %v %v", ok, err)
		}
		first, second := enqueue("first", time.Minute), enqueue("second", time.Minute)
		if res, ok, err := db.TakeHead(ctx, p("second"), second); err != nil || !ok || res.Acquired || res.Holder.Held() {
			t.Fatalf("take by the second waiter of a free name: %+v live=%v %v, want a live refusal", res, ok, err)
		}
		if !live(second) || !live(first) {
			t.Fatal("a refused take by the second waiter changed the queue")
		}
		if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
			t.Fatalf("the name after the second waiter's refused take: %+v %v", h, err)
		}
		taken, ok, err := db.TakeHead(ctx, p("first"), first)
		if err != nil || !ok || !taken.Acquired {
			t.Fatalf("take by the first waiter: %+v live=%v %v", taken, ok, err)
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "first", taken.Token); err != nil || !ok {
			t.Fatalf("release first: %v %v", ok, err)
		}
		if _, err := db.LeaveQueue(ctx, nil, second); err != nil {
			t.Fatalf("leave second: %v", err)
		}

		// The holder's owner re-enters through its waiter; the token stays.
		held, err := db.AcquireLease(ctx, nil, p("holder"))
		if err != nil || !held.Acquired {
			t.Fatalf("acquire by holder: %+v %v", held, err)
		}
		again, ok, err := db.TakeHead(ctx, p("holder"), enqueue("holder", time.Minute))
		if err != nil || !ok || !again.Acquired || again.Token != held.Token || again.Reentry != 2 {
			t.Fatalf("take by the holder's own waiter: %+v live=%v %v, want re-entry 2 of token %d", again, ok, err, held.Token)
		}
		for range 2 {
			if ok, err := db.ReleaseLease(ctx, nil, name, "holder", held.Token); err != nil || !ok {
				t.Fatalf("release holder: %v %v", ok, err)
			}
		}
		takeLockedRow(t, db, p("locked"), enqueue("locked", time.Minute))

		// A missing waiter takes nothing.
		if res, ok, err := db.TakeHead(ctx, p("c"), b+1000); err != nil || ok || res.Acquired {
			t.Fatalf("take by a missing waiter: %+v live=%v %v", res, ok, err)
		}
	})
}

// takeLockedRow: while a transaction holds the free name's row locked,
// waiter id's take is refused at once (a pessimistic holder), and the
// waiter stays queued; it takes once the transaction ends.
func takeLockedRow(t *testing.T, db *store.DB, p store.AcquireParams, id int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if rl, err := db.LockRow(ctx, tx, p.Name, store.RowLockParams{NoWait: true}); err != nil || !rl.Found {
		t.Fatalf("lock the row: %+v, %v", rl, err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, live, err := db.TakeHead(wait, p, id)
	if err != nil || !live || res.Acquired || res.Holder.Mode != dblock.ModePessimistic {
		t.Fatalf("take while a transaction holds the row: %+v live=%v %v, want a refusal naming a pessimistic holder", res, live, err)
	}
	_ = tx.Rollback()
	res, live, err = db.TakeHead(ctx, p, id)
	if err != nil || !live || !res.Acquired {
		t.Fatalf("take after the transaction ended: %+v live=%v %v", res, live, err)
	}
	if ok, err := db.ReleaseLease(ctx, nil, p.Name, p.Owner, res.Token); err != nil || !ok {
		t.Fatalf("release %s: %v %v", p.Owner, ok, err)
	}
}
