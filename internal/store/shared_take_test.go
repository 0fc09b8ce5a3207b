package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// takeReaders opens MariaDB's store for the tests of a read's plain take
// (SharedSQL.TakeFree), which the other databases do not have.
func takeReaders(t *testing.T, name string) (readers, *dbtest.Isolated) {
	t.Helper()
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	if db.Dialect.Shared().TakeFree == "" {
		t.Skip("MySQL 8: reads CALL no procedure, so there is no plain take to try")
	}
	return readers{t: t, db: db, name: name}, iso
}

// freedByRead reads and releases name once, so the next read of it tries
// the take.
func (r readers) freedByRead(owner string) dblock.Token {
	r.t.Helper()
	res := r.read(owner)
	r.release(owner, res.Token, true)
	if !store.TakesFreeRead(r.db, r.name) {
		r.t.Fatalf("after a read and its release, the next read of %q would not try the take", r.name)
	}
	return res.Token
}

// TestReadTakeFree (MariaDB): a name this DB freed is read again by the
// plain take, a new period's token, the reader recorded in the row (its
// holder, listing and count as the procedure records them), and released
// by the plain update; a re-entry and a second reader go through the
// procedure, and the recorded release of a reader moved into
// dblock_shares falls back to the procedure's; a release by another owner
// is refused.
func TestReadTakeFree(t *testing.T) {
	t.Parallel()
	r, _ := takeReaders(t, "take:read")
	ctx := context.Background()
	before := r.freedByRead("r0")
	first := r.read("r1")
	if !first.Recorded || first.Token <= before {
		t.Fatalf("read of a freed name: %+v, want a take with a token above %d", first, before)
	}
	r.holds("r1", first.Token, 1)
	r.listed(first.Token, map[string]int{"r1": 1})
	if r.writeTry("w") {
		t.Fatal("a writer took the name from the reader the take recorded")
	}
	again := r.read("r1")
	if again.Recorded || again.Token != first.Token {
		t.Fatalf("re-entry: %+v, want the procedure's, token %d", again, first.Token)
	}
	r.holds("r1", first.Token, 2)
	r.releaseWith(r.db.ReleaseRecordedShare, "r2", first.Token, false)
	r.releaseWith(r.db.ReleaseRecordedShare, "r1", first.Token, true)
	r.holds("r1", first.Token, 1)
	second := r.read("r2") // Moves r1 into dblock_shares.
	r.listed(first.Token, map[string]int{"r1": 1, "r2": 1})
	r.releaseWith(r.db.ReleaseRecordedShare, "r1", first.Token, true)
	r.releaseWith(r.db.ReleaseRecordedShare, "r1", first.Token, false)
	if r.writeTry("w") {
		t.Fatal("a writer took the name while r2 read it")
	}
	r.release("r2", second.Token, true)
	if !r.writeTry("w") {
		t.Fatal("the writer was refused after the last release")
	}
	// Taken and released by the plain statements alone.
	r.freedByRead("r3")
	third := r.read("r3")
	if !third.Recorded {
		t.Fatalf("read after a release: %+v, want a take", third)
	}
	r.releaseWith(r.db.ReleaseRecordedShare, "r3", third.Token, true)
	if !store.TakesFreeRead(r.db, r.name) || !r.writeTry("w") {
		t.Fatal("the recorded release did not free the name")
	}
	if ok, err := r.db.RenewShare(ctx, r.name, "r3", third.Token, time.Minute); err != nil || ok {
		t.Fatalf("renewal of a released read: %v, %v", ok, err)
	}
}

// TestReadTakeFreeRefused (MariaDB): where the freed name is held by a
// writer or kept for another owner's writer, the take takes nothing,
// forgets the name, and the procedure's refusal names the holder or the
// reservation.
func TestReadTakeFreeRefused(t *testing.T) {
	t.Parallel()
	r, _ := takeReaders(t, "take:read-refused")
	ctx := context.Background()
	r.freedByRead("r0")
	w, err := r.db.AcquireLease(ctx, nil, store.AcquireParams{Name: r.name, Owner: "w", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !w.Acquired {
		t.Fatalf("writer: %+v, %v", w, err)
	}
	if res := r.takeRefused("r1"); res.Holder.Owner != "w" {
		t.Fatalf("read of a written name: %+v; want refused by w", res)
	}
	if ok, err := r.db.ReleaseLease(ctx, nil, r.name, "w", w.Token); err != nil || !ok {
		t.Fatalf("writer's release: %v, %v", ok, err)
	}
	if ok, err := r.db.ReserveLease(ctx, r.name, "w2", time.Now(), time.Minute); err != nil || !ok {
		t.Fatalf("reserve for w2: %v, %v", ok, err)
	}
	if res := r.takeRefused("r1"); res.Holder.Next.Owner != "w2" {
		t.Fatalf("read of a name kept for w2: %+v; want refused, kept for w2", res)
	}
}

// takeRefused reads as owner a name this DB freed lately, and checks the
// read tried the take, was refused, and forgot the name.
func (r readers) takeRefused(owner string) store.ShareResult {
	r.t.Helper()
	if !store.TakesFreeRead(r.db, r.name) {
		r.t.Fatal("the read would not try the take")
	}
	res, err := r.db.AcquireShare(context.Background(), store.ShareParams{Name: r.name, Owner: owner, TTL: time.Minute})
	if err != nil || res.Acquired {
		r.t.Fatalf("read of %s: %+v, %v; want refused", owner, res, err)
	}
	if store.TakesFreeRead(r.db, r.name) {
		r.t.Fatal("the name the take missed was not forgotten")
	}
	return res
}

// TestReadTakeFreeHistory (MariaDB): the history's trigger hides the
// take's insert id; the take reads the token back, it is the row's, and
// the history records the read once, with its metadata.
func TestReadTakeFreeHistory(t *testing.T) {
	t.Parallel()
	r, iso := takeReaders(t, "take:read-history")
	ctx := context.Background()
	r.freedByRead("r0")
	if err := r.db.EnableHistory(ctx); err != nil {
		t.Fatal(err)
	}
	// Another process's DB, which has not met the trigger: it read and
	// freed the name lately too.
	other, err := store.Open(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	o := readers{t: t, db: other, name: r.name}
	o.freedByRead("r0")
	res := o.read("r1")
	if !res.Recorded {
		t.Fatalf("read: %+v, want a take", res)
	}
	r.holds("r1", res.Token, 1)
	o.releaseWith(o.db.ReleaseRecordedShare, "r1", res.Token, true)
	entries, err := r.db.ListHistory(ctx, r.name, time.Hour, 10)
	if err != nil || len(entries) == 0 {
		t.Fatalf("history: %+v, %v", entries, err)
	}
	if e := entries[0]; e.Owner != "r1" || e.Token != int64(res.Token) || e.Mode != dblock.ModeRead || e.Metadata != "m-r1" {
		t.Fatalf("latest history entry %+v, want r1's read at token %d with its metadata", e, res.Token)
	}
}

// joined reads as owner and checks the read joined the period at token
// (ShareResult.Joined), by the plain join when plain.
func (r readers) joined(owner string, token dblock.Token, plain bool) store.ShareResult {
	r.t.Helper()
	if got := store.JoinsRead(r.db, r.name); got != plain {
		r.t.Fatalf("read of %s would try the join first: %v, want %v", owner, got, plain)
	}
	res := r.read(owner)
	if !res.Joined || res.Token != token || res.Granted <= 0 {
		r.t.Fatalf("read of %s: %+v, want joined at token %d", owner, res, token)
	}
	return res
}

// TestReadJoin (MariaDB): once a read of a name joined its running period,
// the next reads join by the plain insert: a share of the period's token
// lasting to its end, a re-entry counted, seen by ShareHolder and
// ListShares, released by the joined release; a writer stays out until
// the last reader leaves. A period with a waiting writer or a reader
// recorded in the row is not joined by it: the name is forgotten, and the
// procedure decides.
func TestReadJoin(t *testing.T) {
	t.Parallel()
	r, _ := takeReaders(t, "take:read-join")
	ctx := context.Background()
	first := r.read("r1")
	r.read("r2") // Moves r1 into dblock_shares, the period's end now r2's.
	tok := first.Token
	r.joined("r3", tok, false)
	r.joined("r4", tok, true)
	again := r.joined("r4", tok, true)
	r.holds("r4", tok, 2)
	r.listed(tok, map[string]int{"r1": 1, "r2": 1, "r3": 1, "r4": 2})
	h, err := r.db.ShareHolder(ctx, r.name, "r2")
	if err != nil || !h.ExpiresAt.After(h.Now.Add(again.Granted-time.Second)) {
		t.Fatalf("r2's share: %+v, %v; the joiner was granted %v", h, err, again.Granted)
	}
	r.releaseWith(r.db.ReleaseJoinedShare, "r4", tok, true)
	r.releaseWith(r.db.ReleaseJoinedShare, "r4", tok, true)
	r.releaseWith(r.db.ReleaseJoinedShare, "r4", tok, false)
	if err := r.db.WantWrite(ctx, r.name, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := r.db.AcquireShare(ctx, store.ShareParams{Name: r.name, Owner: "r5", TTL: 30 * time.Second})
	if err != nil || res.Acquired || !res.WriterWaits {
		t.Fatalf("read while a writer waits: %+v, %v; want refused", res, err)
	}
	if store.JoinsRead(r.db, r.name) {
		t.Fatal("the name the join missed was not forgotten")
	}
	if err := r.db.UnwantWrite(ctx, r.name); err != nil {
		t.Fatal(err)
	}
	r.joined("r5", tok, false)
	for _, o := range []string{"r1", "r2"} {
		r.release(o, tok, true)
	}
	r.releaseWith(r.db.ReleaseJoinedShare, "r3", tok, true)
	if r.writeTry("w") {
		t.Fatal("a writer took the name while r5 read it")
	}
	r.releaseWith(r.db.ReleaseJoinedShare, "r5", tok, true)
	if !r.writeTry("w") {
		t.Fatal("the writer was refused after the last release")
	}
	// A period whose reader is recorded in the row: the plain join misses,
	// and the procedure moves the reader.
	alone := r.read("r6")
	if !alone.Recorded || !store.JoinsRead(r.db, r.name) {
		t.Fatalf("read of the freed name: %+v, want the take (and the join still hinted)", alone)
	}
	second := r.read("r7")
	if second.Joined || second.Token != alone.Token || store.JoinsRead(r.db, r.name) {
		t.Fatalf("read of r7: %+v, want the procedure's join at token %d, the hint forgotten", second, alone.Token)
	}
	r.listed(alone.Token, map[string]int{"r6": 1, "r7": 1})
	r.joined("r8", alone.Token, false)
	r.joined("r9", alone.Token, true)
	for _, o := range []string{"r6", "r7"} {
		r.release(o, alone.Token, true)
	}
	r.releaseWith(r.db.ReleaseJoinedShare, "r8", alone.Token, true)
	r.releaseWith(r.db.ReleaseJoinedShare, "r9", alone.Token, true)
	if !r.writeTry("w") {
		t.Fatal("the writer was refused after the last release")
	}
}
