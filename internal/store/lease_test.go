package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

func TestLeaseStatements(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		db := iso.DB
		acq := func(name, owner string, ttl time.Duration) store.AcquireResult {
			t.Helper()
			r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl, Metadata: "test"})
			if err != nil {
				t.Fatalf("acquire %s/%s: %v", name, owner, err)
			}
			return r
		}
		// Fresh name: acquired with a token.
		r1 := acq("a", "o1", time.Minute)
		if !r1.Acquired || r1.Token <= 0 {
			t.Fatalf("first acquire: %+v", r1)
		}
		// Another owner: not acquired, holder reported.
		r2 := acq("a", "o2", time.Minute)
		if r2.Acquired || r2.Holder.Owner != "o1" || r2.Holder.ExpiresAt.IsZero() {
			t.Fatalf("second owner: %+v", r2)
		}
		// Reentry keeps the token.
		r3 := acq("a", "o1", time.Minute)
		if !r3.Acquired || r3.Token != r1.Token {
			t.Fatalf("reentry: %+v want token %d", r3, r1.Token)
		}
		if r1.Reentry != 1 || (iso.Kind != store.MySQL && r3.Reentry != 2) {
			t.Fatalf("reentry counts %d then %d, want 1 then 2", r1.Reentry, r3.Reentry)
		}
		if r2.Holder.Now.IsZero() || !r2.Holder.ExpiresAt.After(r2.Holder.Now) {
			t.Fatalf("holder without the database clock: %+v", r2.Holder)
		}
		// Renew by owner works, by stranger or wrong token does not.
		if ok, err := store.Of(db).RenewLease(ctx, nil, "a", "o1", r1.Token, time.Minute); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
		if ok, err := store.Of(db).RenewLease(ctx, nil, "a", "o2", r1.Token, time.Minute); err != nil || ok {
			t.Fatalf("renew by stranger: %v %v", ok, err)
		}
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, "a", "o2", r1.Token); err != nil || ok {
			t.Fatalf("release by stranger: %v %v", ok, err)
		}
		// Two releases free it; the third finds nothing.
		for i := 0; i < 2; i++ {
			if ok, err := store.Of(db).ReleaseLease(ctx, nil, "a", "o1", r1.Token); err != nil || !ok {
				t.Fatalf("release %d: %v %v", i, ok, err)
			}
		}
		h, err := store.Of(db).LeaseHolder(ctx, nil, "a")
		if err != nil || !h.Exists || h.Owner != "" || h.Held() {
			t.Fatalf("after release: %+v %v", h, err)
		}
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, "a", "o1", r1.Token); err != nil || ok {
			t.Fatalf("release after free: %v %v", ok, err)
		}
		// Next owner gets a greater token.
		r4 := acq("a", "o2", 50*time.Millisecond)
		if !r4.Acquired || r4.Token <= r1.Token {
			t.Fatalf("o2 acquire: %+v (previous %d)", r4, r1.Token)
		}
		// After expiry by the database clock, o3 takes over with a greater token.
		time.Sleep(120 * time.Millisecond)
		r5 := acq("a", "o3", time.Minute)
		if !r5.Acquired || r5.Token <= r4.Token {
			t.Fatalf("takeover after expiry: %+v (previous %d)", r5, r4.Token)
		}
		if ok, err := store.Of(db).RenewLease(ctx, nil, "a", "o2", r4.Token, time.Minute); err != nil || ok {
			t.Fatalf("renew of expired lease: %v %v", ok, err)
		}
		// Admin release.
		if ok, err := store.Of(db).ForceRelease(ctx, nil, "a"); err != nil || !ok {
			t.Fatalf("force release: %v %v", ok, err)
		}
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, "a", "o3", r5.Token); err != nil || ok {
			t.Fatalf("release after force: %v %v", ok, err)
		}
		// Guard in a transaction.
		r6 := acq("g", "o1", time.Minute)
		tx, err := store.Of(db).BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := store.Of(db).GuardLease(ctx, tx, "g", "o1", r6.Token)
		if err != nil || !ok {
			t.Fatalf("guard: %v %v", ok, err)
		}
		ok, err = store.Of(db).GuardLease(ctx, tx, "g", "o2", r6.Token)
		if err != nil || ok {
			t.Fatalf("guard stranger: %v %v", ok, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSchemaMissingClassified(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			_, err := iso.Store().AcquireLease(context.Background(), nil, store.AcquireParams{Name: "x", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Second})
			if !errors.Is(err, dblock.ErrSchemaMissing) {
				t.Fatalf("got %v, want ErrSchemaMissing", err)
			}
			t.Log(err)
		})
	}
}

// TestFenceLockedMySQL holds the fencing floor's row in an open transaction,
// as a reaper's raise does for one statement (here far longer): a lease
// acquisition and a pessimistic EnsureRow skip the row and retry, then
// report the floor (not a pessimistic holder); once the row is free, both
// succeed, including one that is retrying when it is freed. A name whose key
// another transaction is inserting is reported as such. MySQL only: elsewhere
// there is no fence row to lock.
func TestFenceLockedMySQL(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	db := iso.DB
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	params := func(name string) store.AcquireParams {
		return store.AcquireParams{Name: name, Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Minute}
	}
	tx, err := store.Of(iso.Open(t)).BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE dblock_fence SET floor = floor + 1 WHERE id = 1"); err != nil {
		t.Fatalf("lock the fence row: %v", err)
	}
	res, err := store.Of(db).AcquireLease(ctx, nil, params("fenced"))
	if err != nil || res.Acquired {
		t.Fatalf("acquire with the fence row locked: %+v %v, want not acquired", res, err)
	}
	held := res.Holder.HeldError("fenced", nil)
	if held.Mode == dblock.ModePessimistic || !errors.Is(held, store.ErrFenceBusy) || !errors.Is(held, dblock.ErrNotAcquired) {
		t.Fatalf("refusal %q (mode %q), want one naming the fencing floor", held, held.Mode)
	}
	if err := store.Of(db).EnsureRow(ctx, nil, "fenced-row"); !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, store.ErrFenceBusy) {
		t.Fatalf("EnsureRow with the fence row locked: %v, want ErrNotAcquired naming the floor", err)
	}
	// Freed while an acquisition retries: it succeeds.
	released := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		released <- tx.Rollback()
	}()
	res, err = store.Of(db).AcquireLease(ctx, nil, params("fenced"))
	if rerr := <-released; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || !res.Acquired {
		t.Fatalf("acquire once the fence row is free: %+v %v", res, err)
	}
	if err := store.Of(db).EnsureRow(ctx, nil, "fenced-row"); err != nil {
		t.Fatalf("EnsureRow once the fence row is free: %v", err)
	}
	if h, err := store.Of(db).LeaseHolder(ctx, nil, "fenced-row"); err != nil || !h.Exists || h.Version <= 0 {
		t.Fatalf("row after EnsureRow: %+v %v", h, err)
	}

	// Another transaction inserting the same name holds its key.
	ins, err := store.Of(iso.Open(t)).BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ins.Rollback() }()
	if _, err := ins.ExecContext(ctx, "INSERT INTO dblock_locks (name, reentry, version, updated_at) VALUES ('inserting', 0, 1, UTC_TIMESTAMP(6))"); err != nil {
		t.Fatalf("insert in a transaction: %v", err)
	}
	// (MySQL 8 waits for the key up to its session lock wait bound, then
	// refuses the same way.)
	res, err = store.Of(db).AcquireLease(ctx, nil, params("inserting"))
	if err != nil || res.Acquired || !errors.Is(res.Holder.HeldError("inserting", nil), store.ErrKeyLocked) || res.Holder.Mode == dblock.ModePessimistic {
		t.Fatalf("acquire of a key being inserted: %+v %v, want a refusal naming the locked key", res, err)
	}
}
