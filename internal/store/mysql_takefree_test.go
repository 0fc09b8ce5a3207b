package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestTakeFree (MariaDB): an acquisition of a name this DB released lately
// tries the plain update first (LeaseSQL.TakeFree), and gives every answer
// the upsert gives: it takes a free or expired name with a greater token,
// honours and clears reservations, never re-enters, never waits for a
// transaction holding the row, and a name it could not take is acquired
// (or refused, with its holder) by the upsert.
func TestTakeFree(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	if db.Dialect.Lease().TakeFree == "" {
		t.Skip("MySQL 8: no TakeFree")
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
	// A re-entry is the upsert's (the update takes only a free name).
	if again := acquire("o1", time.Minute, 2); !again.Acquired || again.Token != res.Token {
		t.Fatalf("re-entry: %+v, want token %d", again, res.Token)
	}
	if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Reentry != 2 {
		t.Fatalf("after re-entry: %+v, %v", h, err)
	}
	release("o1", res.Token)
	release("o1", res.Token)

	// Taken by another owner (the name is still one released lately), and
	// refused to a third with the holder: update, upsert, holder read.
	res = acquire("o2", 200*time.Millisecond, 1)
	if refused := acquire("o3", time.Minute, 3); refused.Acquired || refused.Holder.Owner != "o2" {
		t.Fatalf("a held name: %+v", refused)
	}
	// Expired: the upsert takes it over (the refusal made the name one
	// not released lately), with a greater token.
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
	if refused := acquire("o4", time.Minute, 3); refused.Acquired || refused.Holder.Next.Owner != "o5" {
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
	// the upsert names the pessimistic holder.
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

// TestTakeFreeHistoryTrigger (MariaDB): the history's trigger on
// dblock_locks fires when the update takes over an expired lease, and
// hides the token the update reported; the take reads it back, and the
// token is the row's.
func TestTakeFreeHistoryTrigger(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	if db.Dialect.Lease().TakeFree == "" {
		t.Skip("MySQL 8: no TakeFree")
	}
	ctx := context.Background()
	if err := db.EnableHistory(ctx); err != nil {
		t.Fatal(err)
	}
	name := "takefree:history"
	p := store.AcquireParams{Name: name, Owner: "o1", Mode: dblock.ModeOptimistic, TTL: 100 * time.Millisecond}
	first, err := db.AcquireLease(ctx, nil, p)
	if err != nil || !first.Acquired {
		t.Fatalf("first: %+v, %v", first, err)
	}
	iso.WaitExpired(t, ctx, name)
	// Another process's DB, which has not met the trigger, and freed the
	// name lately: the update goes first.
	other, err := store.Open(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.NoteReleased(name)
	if !store.TakesFree(other, name) {
		t.Fatal("the update would not go first")
	}
	p.Owner, p.TTL = "o2", time.Minute
	res, err := other.AcquireLease(ctx, nil, p)
	if err != nil || !res.Acquired || res.Token <= first.Token {
		t.Fatalf("take-over: %+v, %v (first token %d)", res, err, first.Token)
	}
	h, err := db.LeaseHolder(ctx, nil, name)
	if err != nil || h.Owner != "o2" || dblock.Token(h.Version) != res.Token {
		t.Fatalf("row after the take-over: %+v, %v; the take said token %d", h, err, res.Token)
	}
	entries, err := db.ListHistory(ctx, name, time.Hour, 10)
	if err != nil || len(entries) != 1 || entries[0].Owner != "o1" {
		t.Fatalf("history: %+v, %v, want o1's lease, ended", entries, err)
	}
}
