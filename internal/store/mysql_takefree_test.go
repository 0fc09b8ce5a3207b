package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

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
