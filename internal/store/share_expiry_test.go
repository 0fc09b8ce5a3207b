package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestShareExpiry: a reader's share lasts its TTL by the database clock; a
// re-entry never shortens it (a longer TTL lengthens it); a joiner of a
// period gets a share of its own TTL. Granted, when set, says the same.
func TestShareExpiry(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		name := "share:expiry"
		acquire := func(owner string, ttl time.Duration) {
			t.Helper()
			res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: owner, TTL: ttl})
			if err != nil || !res.Acquired {
				t.Fatalf("%s, TTL %v: %+v, %v", owner, ttl, res, err)
			}
			if res.Granted != 0 && (res.Granted < ttl-time.Second || res.Granted > 30*time.Second) {
				t.Errorf("%s, TTL %v: granted %v", owner, ttl, res.Granted)
			}
		}
		expect := func(owner string, reentry int, left time.Duration) {
			t.Helper()
			h, err := db.ShareHolder(ctx, name, owner)
			if err != nil || h.Owner != owner {
				t.Fatalf("share of %s: %+v, %v", owner, h, err)
			}
			got := h.ExpiresAt.Sub(h.Now)
			if h.Reentry != reentry || got > left || got < left-time.Second {
				t.Errorf("share of %s: %d entries, %v left; want %d, %v", owner, h.Reentry, got, reentry, left)
			}
		}
		acquire("r1", 2*time.Second)
		expect("r1", 1, 2*time.Second)
		acquire("r1", 30*time.Second) // The period is too short to join: the row is locked.
		expect("r1", 2, 30*time.Second)
		acquire("r1", 3*time.Second) // Joins the period; keeps its longer share.
		expect("r1", 3, 30*time.Second)
		acquire("r2", 4*time.Second) // A new share in the period.
		expect("r2", 1, 4*time.Second)
	})
}
