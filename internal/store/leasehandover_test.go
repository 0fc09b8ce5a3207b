package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestHandLease (PostgreSQL): a release that hands the name to another
// owner's acquisition does so only when the release frees the name for it:
// the holder's last entry, no other owner's live reservation, no other
// transaction holding the row, another owner; then the name is that
// owner's lease with a greater token, and the reservation it held is gone.
// Otherwise it releases as a plain release would, and names the owner a
// reservation keeps the name for. A lease not held is neither released
// nor handed. (Where the database cannot hand over, it only releases.)
func TestHandLease(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL, store.SQLite} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			c := handOverCase{t: t, db: dbtest.New(t, kind).Store(), ctx: context.Background(), name: "handlease"}
			if !c.db.HandsOverLeases() {
				handLeaseReleases(c)
				return
			}
			handLeaseHands(c)
			handLeaseKeeps(c)
		})
	}
}

func leaseParams(name, owner string) store.AcquireParams {
	return store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Minute, Metadata: "m-" + owner}
}

func (c handOverCase) take(owner string) dblock.Token {
	c.t.Helper()
	res, err := c.db.AcquireLease(c.ctx, nil, leaseParams(c.name, owner))
	if err != nil || !res.Acquired {
		c.t.Fatalf("acquire %s: %+v %v", owner, res, err)
	}
	return res.Token
}

func (c handOverCase) hand(owner string, token dblock.Token, to string) store.HandOff {
	c.t.Helper()
	h, err := c.db.HandLease(c.ctx, c.name, owner, token, leaseParams(c.name, to))
	if err != nil {
		c.t.Fatalf("hand %s's %d to %s: %v", owner, token, to, err)
	}
	return h
}

// handLeaseReleases: without hand-offs, HandLease is the release.
func handLeaseReleases(c handOverCase) {
	tok := c.take("a")
	if h := c.hand("a", tok, "b"); !h.Released || h.Handed {
		c.t.Fatalf("hand-off where the database cannot hand over: %+v, want released only", h)
	}
	if h := c.holder(); h.Held() {
		c.t.Fatalf("row after the release: %+v, want free", h)
	}
}

// handLeaseHands: the cases that hand the name over, and those that
// release it only.
func handLeaseHands(c handOverCase) {
	t := c.t
	tok := c.take("a")
	if h := c.hand("a", tok+100, "b"); h.Released || h.Handed {
		t.Fatalf("hand-off of a token not held: %+v, want nothing done", h)
	}
	h := c.hand("a", tok, "b")
	if !h.Released || !h.Handed || h.Token <= tok || h.Reentry != 1 {
		t.Fatalf("hand-off of a's only entry: %+v, want handed to b with a token above %d", h, tok)
	}
	row := c.holder()
	if !row.Held() || row.Owner != "b" || row.Version != int64(h.Token) || row.Reentry != 1 || row.Mode != dblock.ModeOptimistic {
		t.Fatalf("row after the hand-off: %+v, want b's lease, token %d", row, h.Token)
	}
	if left := row.ExpiresAt.Sub(row.Now); left < 50*time.Second || left > time.Minute {
		t.Fatalf("hand-off's lease ends in %v, want its TTL (1m)", left)
	}
	// Re-entered: the release only ends an entry.
	if again := c.take("b"); again != h.Token {
		t.Fatalf("re-entry token %d, want %d", again, h.Token)
	}
	if h2 := c.hand("b", h.Token, "c"); !h2.Released || h2.Handed {
		t.Fatalf("hand-off of one of two entries: %+v, want released only", h2)
	}
	// To its own owner: released only.
	if h3 := c.hand("b", h.Token, "b"); !h3.Released || h3.Handed {
		t.Fatalf("hand-off to the releasing owner: %+v, want released only", h3)
	}
	if row := c.holder(); row.Held() {
		t.Fatalf("row after b's last release: %+v, want free", row)
	}
}

// handLeaseKeeps: a reservation of another owner, or another transaction
// holding the row, leaves the name released; the reserver's own
// reservation is handed to it and cleared.
func handLeaseKeeps(c handOverCase) {
	t := c.t
	tok := c.take("a")
	if ok, err := c.db.ReserveLease(c.ctx, c.name, "r", time.Now().Add(-time.Second), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for r: %v %v", ok, err)
	}
	if h := c.hand("a", tok, "b"); !h.Released || h.Handed || h.Kept != "r" {
		t.Fatalf("hand-off of a name r reserved: %+v, want released, kept for r", h)
	}
	tok = c.take("r")
	if ok, err := c.db.ReserveLease(c.ctx, c.name, "b", time.Now().Add(-time.Second), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for b: %v %v", ok, err)
	}
	h := c.hand("r", tok, "b")
	if !h.Handed {
		t.Fatalf("hand-off to the reserver: %+v, want handed", h)
	}
	if row := c.holder(); row.Owner != "b" || row.Next.Owner != "" {
		t.Fatalf("row after the hand-off to the reserver: %+v, want b's, no reservation", row)
	}
	// Another transaction holds the row: released, not handed.
	blocker, err := c.db.BeginTxx(c.ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = blocker.Rollback() }()
	var one int
	if err := blocker.QueryRowxContext(c.ctx, "SELECT 1 FROM dblock_locks WHERE name = $1 FOR KEY SHARE", c.name).Scan(&one); err != nil {
		t.Fatalf("lock the row: %v", err)
	}
	if h2 := c.hand("b", h.Token, "c"); !h2.Released || h2.Handed {
		t.Fatalf("hand-off of a row another transaction holds: %+v, want released only", h2)
	}
}
