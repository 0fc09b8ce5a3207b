package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestTakeFree (PostgreSQL, MariaDB): an acquisition of a name this DB
// released lately tries the conditional update first (LeaseSQL.TakeFree),
// and gives every answer Acquire gives: it takes a free or expired name with
// a greater token, honours and clears reservations, never re-enters, never
// waits for a transaction holding the row, and a name it could not take is
// acquired (or refused, with its holder) by Acquire.
func TestTakeFree(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			if iso.Store().Dialect.Lease().TakeFree == "" {
				t.Skip("MySQL 8: no TakeFree")
			}
			takeFreeRules(t, iso)
			takeFreeSeen(t, iso)
		})
	}
}

// takeFreeRules is TestTakeFree on one database.
func takeFreeRules(t *testing.T, iso *dbtest.Isolated) {
	db := iso.Store()
	// A refusal after the take missed: the take, Acquire and, on MariaDB,
	// the holder's read (PostgreSQL's Acquire returns the holder).
	refusal := 2
	if iso.Kind == store.MySQL {
		refusal = 3
	}
	ctx := context.Background()
	name := "takefree"
	params := func(owner string, ttl time.Duration) store.AcquireParams {
		return store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl}
	}
	var last dblock.Token
	acquire := func(owner string, ttl time.Duration, statements int) store.AcquireResult {
		t.Helper()
		res, err := db.AcquireLease(ctx, nil, params(owner, ttl))
		if err != nil {
			t.Fatalf("%s: %v", owner, err)
		}
		if res.Acquired {
			// A first entry gets a greater token than every earlier one.
			if res.Token < last || res.Token == last && res.Reentry == 1 {
				t.Fatalf("%s: token %d (entry %d) after %d", owner, res.Token, res.Reentry, last)
			}
			last = res.Token
		}
		if statements != 0 && res.Statements != statements {
			t.Errorf("%s: %d statements, want %d", owner, res.Statements, statements)
		}
		return res
	}
	release := func(owner string, token dblock.Token) {
		t.Helper()
		if ok, err := db.ReleaseLease(ctx, nil, name, owner, token); err != nil || !ok {
			t.Fatalf("release by %s: %v, %v", owner, ok, err)
		}
	}

	// Released lately: the update takes it, one statement, a first entry.
	res := acquire("o1", time.Minute, 0)
	release("o1", res.Token)
	res = acquire("o1", time.Minute, 1)
	if !res.Acquired || res.Reentry != 1 {
		t.Fatalf("take of a name released lately: %+v", res)
	}
	// A re-entry is Acquire's (the update takes only a free name).
	if again := acquire("o1", time.Minute, 2); !again.Acquired || again.Token != res.Token {
		t.Fatalf("re-entry: %+v, want token %d", again, res.Token)
	}
	if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Reentry != 2 {
		t.Fatalf("after re-entry: %+v, %v", h, err)
	}
	release("o1", res.Token)
	release("o1", res.Token)

	// Taken by another owner (the name is still one released lately), and
	// refused to a third with the holder.
	res = acquire("o2", 200*time.Millisecond, 1)
	if refused := acquire("o3", time.Minute, refusal); refused.Acquired || refused.Holder.Owner != "o2" {
		t.Fatalf("a held name: %+v", refused)
	}
	// Expired: Acquire takes it over (the refusal made the name one not
	// released lately), with a greater token.
	iso.WaitExpired(t, ctx, name)
	res = acquire("o3", time.Minute, 1)
	if !res.Acquired {
		t.Fatalf("an expired lease: %+v", res)
	}

	// A reservation made while o3 held the name: the update takes the name
	// for the reserver only, and clears the reservation.
	if ok, err := db.ReserveLease(ctx, name, "o5", time.Now(), 30*time.Second); err != nil || !ok {
		t.Fatalf("reserve: %v, %v", ok, err)
	}
	release("o3", res.Token)
	if refused := acquire("o4", time.Minute, refusal); refused.Acquired || refused.Holder.Next.Owner != "o5" {
		t.Fatalf("a name reserved for another: %+v", refused)
	}
	db.NoteReleased(name) // As if released lately again: o4's refusal forgot it.
	res = acquire("o5", time.Minute, 1)
	if !res.Acquired {
		t.Fatalf("the reserver: %+v", res)
	}
	if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Owner != "o5" || h.Next.Owner != "" {
		t.Fatalf("after the reserver's take: %+v, %v", h, err)
	}
	release("o5", res.Token)

	// A transaction holds the row: the update does not wait for it, and
	// Acquire names the pessimistic holder.
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if rl, err := db.LockRow(ctx, tx, name, store.RowLockParams{NoWait: true}); err != nil || !rl.Found {
		t.Fatalf("lock the row: %+v, %v", rl, err)
	}
	if refused := acquire("o6", time.Minute, 0); refused.Acquired || refused.Holder.Mode != dblock.ModePessimistic {
		t.Fatalf("a row a transaction holds: %+v", refused)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	db.NoteReleased(name) // o6's refusal forgot it.
	if res = acquire("o6", time.Minute, 1); !res.Acquired {
		t.Fatalf("after the transaction: %+v", res)
	}
}

// takeFreeSeen: a caller that saw the name free (AcquireParams.FreeSeen: a
// waiter woken by a release announced to it, a poller that read the row)
// gets the update first on a DB that did not release the name itself; a
// name taken meanwhile is refused by Acquire after it, with its holder.
func takeFreeSeen(t *testing.T, iso *dbtest.Isolated) {
	ctx := context.Background()
	name := "takefree:seen"
	db := iso.Store()
	p := store.AcquireParams{Name: name, Owner: "s1", Mode: dblock.ModeOptimistic, TTL: time.Minute}
	first, err := db.AcquireLease(ctx, nil, p)
	if err != nil || !first.Acquired {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if ok, err := db.ReleaseLease(ctx, nil, name, "s1", first.Token); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	// Another process's DB: the name is not one it released lately.
	other, err := store.Open(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if store.TakesFree(other, name) {
		t.Fatal("a DB that released nothing takes first")
	}
	p.Owner, p.FreeSeen = "s2", true
	res, err := other.AcquireLease(ctx, nil, p)
	if err != nil || !res.Acquired || res.Statements != 1 || res.Token <= first.Token {
		t.Fatalf("seen free: %+v, %v; want taken in one statement, token above %d", res, err, first.Token)
	}
	// Seen free, but taken since: the update misses, Acquire refuses.
	refusal := 2
	if iso.Kind == store.MySQL {
		refusal = 3
	}
	p.Owner = "s3"
	refused, err := other.AcquireLease(ctx, nil, p)
	if err != nil || refused.Acquired || refused.Holder.Owner != "s2" || refused.Statements != refusal {
		t.Fatalf("seen free, held since: %+v, %v; want refused with s2 named in %d statements", refused, err, refusal)
	}
}
