package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// handOverCase is the state of TestHandOver's steps: one name, its holder
// and its queue.
type handOverCase struct {
	t    *testing.T
	db   *store.DB
	ctx  context.Context
	name string
}

func (c handOverCase) params(owner string) store.AcquireParams {
	return store.AcquireParams{Name: c.name, Owner: owner, Mode: dblock.ModeFair, TTL: time.Minute}
}

func (c handOverCase) acquire(owner string) dblock.Token {
	c.t.Helper()
	res, err := c.db.AcquireLease(c.ctx, nil, c.params(owner))
	if err != nil || !res.Acquired {
		c.t.Fatalf("acquire %s: %+v %v", owner, res, err)
	}
	return res.Token
}

func (c handOverCase) enqueue(owner string, timeout time.Duration) int64 {
	c.t.Helper()
	w, err := c.db.Enqueue(c.ctx, nil, c.name, owner, store.WaitExclusive, timeout)
	if err != nil {
		c.t.Fatalf("enqueue %s: %v", owner, err)
	}
	return w.ID
}

func (c handOverCase) live(id int64) bool {
	c.t.Helper()
	s, err := c.db.CheckWaiter(c.ctx, nil, c.name, id)
	if err != nil {
		c.t.Fatalf("check %d: %v", id, err)
	}
	return s.Live
}

func (c handOverCase) holder() store.Holder {
	c.t.Helper()
	h, err := c.db.LeaseHolder(c.ctx, nil, c.name)
	if err != nil {
		c.t.Fatalf("holder: %v", err)
	}
	return h
}

func (c handOverCase) handOver(owner string, token dblock.Token, waiter string, id int64) store.HandOff {
	c.t.Helper()
	h, err := c.db.HandOver(c.ctx, c.name, owner, token, c.params(waiter), id)
	if err != nil {
		c.t.Fatalf("hand over %s → %s: %v", owner, waiter, err)
	}
	return h
}

// TestHandOver: a release that hands the name to a waiter live and first in
// the queue makes it the waiter's lease (a new, larger token) and deletes
// the waiter's row in one statement; a waiter behind another, a dead one,
// or a re-entered holder gets nothing and the statement releases (or
// decrements) as a release does; a lease not held is neither released nor
// handed. Where the database cannot hand over, it releases.
func TestHandOver(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := handOverCase{t: t, db: iso.Store(), ctx: context.Background(), name: "hand-over"}
		tok := c.acquire("a")
		first := c.enqueue("b", time.Minute)
		second := c.enqueue("c", time.Minute)
		if !c.db.HandsOver() {
			if h := c.handOver("a", tok, "b", first); !h.Released || h.Handed {
				t.Fatalf("hand-over on %s: %+v, want a release only", iso.Kind, h)
			}
			if h := c.holder(); h.Held() || !c.live(first) {
				t.Fatalf("the name after a release on %s: %+v (waiter live: %v)", iso.Kind, h, c.live(first))
			}
			return
		}
		if h := c.handOver("a", tok+1000, "b", first); h.Released || h.Handed {
			t.Fatalf("hand-over of a lease not held: %+v", h)
		}
		// The second waiter is not first: the name is released, not handed.
		if h := c.handOver("a", tok, "c", second); !h.Released || h.Handed {
			t.Fatalf("hand-over to a waiter behind another: %+v", h)
		}
		if h := c.holder(); h.Held() || !c.live(first) || !c.live(second) {
			t.Fatalf("after a release to nobody: %+v (queued: %v %v)", h, c.live(first), c.live(second))
		}
		// A holder's re-entry is decremented, not handed.
		tok = c.acquire("a")
		c.acquire("a")
		if h := c.handOver("a", tok, "b", first); !h.Released || h.Handed {
			t.Fatalf("hand-over of a re-entered lease: %+v", h)
		}
		if h := c.holder(); h.Owner != "a" || h.Reentry != 1 {
			t.Fatalf("after the inner release: %+v", h)
		}
		// The first waiter gets the name: its token, its row gone.
		h := c.handOver("a", tok, "b", first)
		if !h.Released || !h.Handed || h.Token <= tok || h.Reentry != 1 {
			t.Fatalf("hand-over to the first waiter: %+v (token before %d)", h, tok)
		}
		if row := c.holder(); row.Owner != "b" || row.Version != int64(h.Token) || row.Mode != dblock.ModeFair || c.live(first) {
			t.Fatalf("after the hand-over: %+v (waiter live: %v)", row, c.live(first))
		}
		// A dead waiter first gets nothing; the name is released.
		dead := c.enqueue("d", time.Millisecond)
		c.leave(second)
		time.Sleep(20 * time.Millisecond)
		if h2 := c.handOver("b", h.Token, "d", dead); !h2.Released || h2.Handed {
			t.Fatalf("hand-over to a dead waiter: %+v", h2)
		}
		if row := c.holder(); row.Held() {
			t.Fatalf("after a hand-over to a dead waiter: %+v", row)
		}
	})
}

// TestHandOverWithoutProcedure: on MariaDB before MySQL migration 00028
// (or grants written before it) the call is refused; HandOver then releases,
// and goes on releasing without calling.
func TestHandOverWithoutProcedure(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	c := handOverCase{t: t, db: iso.Store(), ctx: context.Background(), name: "hand-over-refused"}
	if !c.db.HandsOver() {
		t.Skip("MySQL 8 has no hand-over's call: TestHandOver released")
	}
	if _, err := c.db.ExecContext(c.ctx, "DROP PROCEDURE dblock_hand_over"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		tok := c.acquire("a")
		first := c.enqueue("b", time.Minute)
		if h := c.handOver("a", tok, "b", first); !h.Released || h.Handed {
			t.Fatalf("hand-over without the procedure: %+v, want a release only", h)
		}
		if h := c.holder(); h.Held() || !c.live(first) {
			t.Fatalf("after the release: %+v (waiter live: %v)", h, c.live(first))
		}
		c.leave(first)
	}
}

func (c handOverCase) leave(id int64) {
	c.t.Helper()
	if _, err := c.db.LeaveQueue(c.ctx, nil, id); err != nil {
		c.t.Fatalf("leave %d: %v", id, err)
	}
}

// TestHandOverUnderSharedHold: a lease that ran out may be followed by a
// pessimistic shared hold, which locks the row without changing it; the
// lease's late release must not hand the name to a waiter while that hold
// lasts (an exclusive lease would overlap it). PostgreSQL's shared hold is
// FOR KEY SHARE, which a release's lock lets through.
func TestHandOverUnderSharedHold(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			c := handOverCase{t: t, db: iso.Store(), ctx: context.Background(), name: "hand-over-shared"}
			res, err := c.db.AcquireLease(c.ctx, nil, store.AcquireParams{Name: c.name, Owner: "a", Mode: dblock.ModeFair, TTL: 100 * time.Millisecond})
			if err != nil || !res.Acquired {
				t.Fatalf("acquire: %+v %v", res, err)
			}
			first := c.enqueue("b", time.Minute)
			iso.WaitExpired(t, c.ctx, c.name)
			tx, err := c.db.BeginTxx(c.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if rl, err := c.db.LockRow(c.ctx, tx, c.name, store.RowLockParams{NoWait: true, Shared: true}); err != nil || !rl.Found {
				t.Fatalf("the shared hold: %+v, %v", rl, err)
			}
			ctx, cancel := context.WithTimeout(c.ctx, 3*time.Second)
			defer cancel()
			// MariaDB's call waits for the row and gives up (an error that
			// did nothing); PostgreSQL's releases.
			h, err := c.db.HandOver(ctx, c.name, "a", res.Token, c.params("b"), first)
			if h.Handed {
				t.Fatalf("hand-over under a shared hold: %+v, %v: the waiter got the name the hold holds", h, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if row := c.holder(); row.Owner == "b" || !c.live(first) {
				t.Fatalf("after the shared hold: %+v (waiter live: %v)", row, c.live(first))
			}
		})
	}
}
