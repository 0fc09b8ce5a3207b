package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestTakeHead: where a waiter's take is one statement (PostgreSQL), it
// takes the lock and deletes the waiter's row together; it takes nothing for
// a dead or missing waiter, and while the lock is held it refuses, naming
// the holder, and leaves the waiter queued. Elsewhere it refuses.
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

		// A missing waiter takes nothing.
		if res, ok, err := db.TakeHead(ctx, p("c"), b+1000); err != nil || ok || res.Acquired {
			t.Fatalf("take by a missing waiter: %+v live=%v %v", res, ok, err)
		}
	})
}
