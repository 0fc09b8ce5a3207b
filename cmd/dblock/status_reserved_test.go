package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestStatusReservedFreeName: a name its holder released while a waiter of
// another process kept it is listed by status under "reserved" with that
// waiter, not under "free", on every database; once the reserver gives the
// reservation up it is free again.
func TestStatusReservedFreeName(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		const name = "kept-free"
		db := iso.Store()
		res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "holder", Mode: "optimistic", TTL: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		now, err := db.ClockNow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := db.ReserveLease(ctx, name, "waiter", now, time.Minute); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "holder", res.Token); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		c := cli{dsn: iso.DSN}
		var st statusJSON
		r := c.expect(t, 0, "status", "--json", name)
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		if len(st.Free) != 0 || len(st.Locks) != 0 || len(st.Reserved) != 1 || st.Reserved[0].Name != name ||
			st.Reserved[0].ReservedFor != "waiter" || st.Reserved[0].ReservedUntil <= st.Now {
			t.Errorf("status --json of a reserved free name: %+v", st)
		}
		if r := c.expect(t, 0, "status", name); !strings.Contains(r.stdout, name+": free, kept for waiter (waiting ") {
			t.Errorf("status table of a reserved free name:\n%s", r.stdout)
		}
		if ok, err := db.UnreserveLease(ctx, name, "waiter"); err != nil || !ok {
			t.Fatalf("unreserve: %v %v", ok, err)
		}
		st = statusJSON{}
		r = c.expect(t, 0, "status", "--json", name)
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Reserved) != 0 || len(st.Free) != 1 {
			t.Errorf("status --json once the reservation is given up: %+v (%v)", st, err)
		}
	})
}
