package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// readers drives the shared-lock calls of one name for the tests of a
// name's only reader (which PostgreSQL records in the name's row).
type readers struct {
	t    *testing.T
	db   *store.DB
	name string
}

func (r readers) read(owner string) store.ShareResult {
	r.t.Helper()
	res, err := r.db.AcquireShare(context.Background(), store.ShareParams{Name: r.name, Owner: owner, TTL: 30 * time.Second, Metadata: "m-" + owner})
	if err != nil || !res.Acquired {
		r.t.Fatalf("read %s: %+v, %v", owner, res, err)
	}
	return res
}

func (r readers) release(owner string, token dblock.Token, want bool) {
	r.t.Helper()
	r.releaseWith(r.db.ReleaseShare, owner, token, want)
}

// releaseWith releases owner's share through rel, one of the DB's
// releases of a share, and checks it reports want.
func (r readers) releaseWith(rel func(context.Context, string, string, dblock.Token) (bool, error), owner string, token dblock.Token, want bool) {
	r.t.Helper()
	if ok, err := rel(context.Background(), r.name, owner, token); err != nil || ok != want {
		r.t.Fatalf("release of %s: %v, %v; want %v", owner, ok, err, want)
	}
}

// holds checks owner's share as ShareHolder reads it.
func (r readers) holds(owner string, token dblock.Token, reentry int) {
	r.t.Helper()
	h, err := r.db.ShareHolder(context.Background(), r.name, owner)
	if err != nil || h.Owner != owner || h.Version != int64(token) || h.Reentry != reentry || !h.ExpiresAt.After(h.Now) {
		r.t.Fatalf("holder %s: %+v, %v; want token %d, reentry %d, unexpired", owner, h, err, token, reentry)
	}
}

// listed checks the unexpired readers ListShares reads, owner → reentry.
func (r readers) listed(token dblock.Token, want map[string]int) {
	r.t.Helper()
	list, err := r.db.ListShares(context.Background(), []string{r.name})
	if err != nil {
		r.t.Fatal(err)
	}
	got := map[string]int{}
	for _, s := range list {
		if s.Token != int64(token) {
			r.t.Fatalf("listed %+v: want token %d", s, token)
		}
		got[s.Owner] = s.Reentry
	}
	if len(got) != len(want) {
		r.t.Fatalf("listed %v, want %v", got, want)
	}
	for o, n := range want {
		if got[o] != n {
			r.t.Fatalf("listed %v, want %v", got, want)
		}
	}
}

// writeTry tries an exclusive lease of the name and releases it.
func (r readers) writeTry(owner string) bool {
	r.t.Helper()
	ctx := context.Background()
	res, err := r.db.AcquireLease(ctx, nil, store.AcquireParams{Name: r.name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: 30 * time.Second})
	if err != nil {
		r.t.Fatalf("write: %v", err)
	}
	if res.Acquired {
		if ok, err := r.db.ReleaseLease(ctx, nil, r.name, owner, res.Token); err != nil || !ok {
			r.t.Fatalf("release of the writer: %v, %v", ok, err)
		}
	}
	return res.Acquired
}

// TestOnlyReader: a reader alone, its re-entry and renewal, a second
// reader joining (PostgreSQL moves the first from the name's row into
// dblock_shares, its count and acquisition kept), and the releases, seen
// through ShareHolder, ListShares and a writer's tries; the same on every
// database.
func TestOnlyReader(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		r := readers{t: t, db: iso.Store(), name: "share:only-reader"}
		ctx := context.Background()
		first := r.read("r1")
		r.holds("r1", first.Token, 1)
		if again := r.read("r1"); again.Token != first.Token {
			t.Fatalf("re-entry: token %d, want %d", again.Token, first.Token)
		}
		r.holds("r1", first.Token, 2)
		if ok, err := r.db.RenewShare(ctx, r.name, "r1", first.Token, time.Minute); err != nil || !ok {
			t.Fatalf("renew r1: %v, %v", ok, err)
		}
		if ok, err := r.db.RenewShare(ctx, r.name, "r2", first.Token, time.Minute); err != nil || ok {
			t.Fatalf("renew by an owner that does not read: %v, %v", ok, err)
		}
		r.listed(first.Token, map[string]int{"r1": 2})
		second := r.read("r2")
		if second.Token != first.Token {
			t.Fatalf("joiner's token %d, want the period's %d", second.Token, first.Token)
		}
		r.holds("r1", first.Token, 2)
		r.holds("r2", first.Token, 1)
		r.listed(first.Token, map[string]int{"r1": 2, "r2": 1})
		if ok, err := r.db.RenewShare(ctx, r.name, "r1", first.Token, time.Minute); err != nil || !ok {
			t.Fatalf("renew r1 after the join: %v, %v", ok, err)
		}
		r.release("r1", first.Token, true)
		r.release("r1", first.Token, true)
		r.release("r1", first.Token, false)
		if r.writeTry("w") {
			t.Fatal("a writer took the name while r2 read it")
		}
		r.release("r2", second.Token, true)
		if !r.writeTry("w") {
			t.Fatal("the writer was refused after the last release")
		}
		// Alone again: two entries given up, the second frees the name.
		third := r.read("r3")
		if third.Token <= first.Token {
			t.Fatalf("a new period's token %d, the last one's %d", third.Token, first.Token)
		}
		r.read("r3")
		r.release("r3", third.Token, true)
		if r.writeTry("w") {
			t.Fatal("a writer took the name while r3 still read it once")
		}
		r.release("r3", third.Token, true)
		r.release("r3", third.Token, false)
		r.listed(0, map[string]int{})
		if !r.writeTry("w") {
			t.Fatal("the writer was refused after r3's last release")
		}
	})
}

// TestOnlyReaderExpiredThenDowngrade: a reader alone whose lease runs out
// leaves nothing behind that counts as a reader later: a writer takes the
// name, takes the read lock too (a downgrade) and hands the name to
// readers on its exclusive release; a reader joins, and when it and the
// former writer have released, the name is free at once.
func TestOnlyReaderExpiredThenDowngrade(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		r := readers{t: t, db: iso.Store(), name: "share:only-reader-expired"}
		ctx := context.Background()
		res, err := r.db.AcquireShare(ctx, store.ShareParams{Name: r.name, Owner: "gone", TTL: 200 * time.Millisecond})
		if err != nil || !res.Acquired {
			t.Fatalf("read gone: %+v, %v", res, err)
		}
		time.Sleep(400 * time.Millisecond) // Its lease runs out unreleased.
		w, err := r.db.AcquireLease(ctx, nil, store.AcquireParams{Name: r.name, Owner: "w", Mode: dblock.ModeOptimistic, TTL: 30 * time.Second})
		if err != nil || !w.Acquired || w.Token <= res.Token {
			t.Fatalf("writer over the expired reader: %+v, %v", w, err)
		}
		down := r.read("w")
		if down.Token != w.Token {
			t.Fatalf("downgrade's token %d, want the writer's %d", down.Token, w.Token)
		}
		if ok, err := r.db.ReleaseLease(ctx, nil, r.name, "w", w.Token); err != nil || !ok {
			t.Fatalf("exclusive release: %v, %v", ok, err)
		}
		joiner := r.read("r")
		r.listed(w.Token, map[string]int{"w": 1, "r": 1})
		r.release("r", joiner.Token, true)
		r.release("w", down.Token, true)
		if !r.writeTry("w2") {
			t.Fatal("the name stayed held after its readers released (a reader left over from the expired one?)")
		}
	})
}

// TestOnlyReaderHistory: the history records a reader alone (in the
// name's row on PostgreSQL) once, as read and released, with its metadata,
// also when a second reader joined it.
func TestOnlyReaderHistory(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		if !db.HistorySupported() {
			t.Skipf("%s keeps no history", iso.Kind)
		}
		ctx := context.Background()
		if err := db.EnableHistory(ctx); err != nil {
			t.Fatal(err)
		}
		r := readers{t: t, db: db, name: "share:only-reader-history"}
		alone := r.read("r1")
		r.release("r1", alone.Token, true)
		joined := r.read("r1")
		second := r.read("r2")
		r.release("r1", joined.Token, true)
		r.release("r2", second.Token, true)
		entries, err := db.ListHistory(ctx, r.name, time.Hour, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64][]string{}
		for _, e := range entries {
			if e.Mode != string(dblock.ModeRead) || e.How != "released" || e.Metadata != "m-"+e.Owner {
				t.Fatalf("history entry %+v: want a read, released, with its metadata", e)
			}
			got[e.Token] = append(got[e.Token], e.Owner)
		}
		if len(entries) != 3 || len(got[int64(alone.Token)]) != 1 || len(got[int64(joined.Token)]) != 2 {
			t.Fatalf("history %+v: want r1 alone at %d, r1 and r2 at %d", entries, alone.Token, joined.Token)
		}
	})
}

// TestEarlierClientsReader: on PostgreSQL and MariaDB, the
// dblock_acquire_share that clients before PostgreSQL migration 00017 and
// MySQL 00025 call keeps every reader in dblock_shares, and joins a period
// whose reader is recorded in the name's row by moving that reader there;
// the releases of both kinds free the name.
func TestEarlierClientsReader(t *testing.T) {
	t.Parallel()
	calls := map[store.Kind]string{
		store.Postgres: `SELECT * FROM dblock_acquire_share($1, $2, 30000000, NULL)`,
		store.MySQL:    `CALL dblock_acquire_share(?, ?, 30000000, NULL)`,
	}
	for kind, call := range calls {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			earlierClients(t, dbtest.New(t, kind).Store(), call)
		})
	}
}

func earlierClients(t *testing.T, db *store.DB, call string) {
	r := readers{t: t, db: db, name: "share:earlier-client"}
	ctx := context.Background()
	earlier := func(owner string) dblock.Token {
		t.Helper()
		var ok, waits bool
		var token, exp, now, granted int64
		var holder, mode string
		err := r.db.QueryRowxContext(ctx, call, r.name, owner).Scan(&ok, &token, &holder, &mode, &exp, &now, &waits, &granted)
		if err != nil || !ok {
			t.Fatalf("earlier client's read by %s: %v, %v", owner, ok, err)
		}
		return dblock.Token(token)
	}
	shares := func() int {
		t.Helper()
		var n int
		q := `SELECT count(*) FROM dblock_shares WHERE name = ` + r.db.Dialect.Placeholder(1)
		if err := r.db.GetContext(ctx, &n, q, r.name); err != nil {
			t.Fatal(err)
		}
		return n
	}
	old := earlier("old")
	if n := shares(); n != 1 {
		t.Fatalf("an earlier client's reader alone: %d shares, want 1", n)
	}
	now := r.read("new")
	r.listed(old, map[string]int{"old": 1, "new": 1})
	r.release("old", old, true)
	r.release("new", now.Token, true)
	if !r.writeTry("w") {
		t.Fatal("the writer was refused after both releases")
	}
	alone := r.read("new")
	if n := shares(); n != 0 {
		t.Fatalf("a reader alone: %d shares, want 0 (recorded in the name's row)", n)
	}
	old = earlier("old")
	if old != alone.Token || shares() != 2 {
		t.Fatalf("earlier client joining: token %d (want %d), %d shares (want 2)", old, alone.Token, shares())
	}
	r.release("new", alone.Token, true)
	r.release("old", old, true)
	if !r.writeTry("w") {
		t.Fatal("the writer was refused after both releases")
	}
}
