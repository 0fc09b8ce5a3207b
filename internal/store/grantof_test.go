package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestGrantOf: a grant records the request that made it, GrantOf finds it
// by that request (and no other request's, nor a refused request's), and a
// released grant is gone.
func TestGrantOf(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db := iso.Store()
		p := store.PermitParams{Name: "grant-of", Owner: "a", Limit: 1, Permits: 1, TTL: time.Minute, Request: store.NewRequest()}
		res, err := db.AcquirePermits(ctx, p)
		if err != nil || !res.Acquired {
			t.Fatalf("grant: %+v, %v", res, err)
		}
		refused := p
		refused.Request = store.NewRequest()
		if res2, err := db.AcquirePermits(ctx, refused); err != nil || res2.Acquired {
			t.Fatalf("a grant past the limit: %+v, %v", res2, err)
		}
		h, err := db.GrantOf(ctx, p.Name, p.Request)
		if err != nil || !h.Exists || dblock.Token(h.Version) != res.Token || !h.ExpiresAt.After(h.Now) {
			t.Fatalf("GrantOf the granted request = %+v, %v; want the grant, token %d, unexpired", h, err, res.Token)
		}
		for what, req := range map[string]string{"the refused request": refused.Request, "a request never sent": store.NewRequest()} {
			if h, err := db.GrantOf(ctx, p.Name, req); err != nil || h.Exists {
				t.Fatalf("GrantOf %s = %+v, %v; want none", what, h, err)
			}
		}
		if h, err := db.GrantOf(ctx, "grant-of-other", p.Request); err != nil || h.Exists {
			t.Fatalf("GrantOf the request on another name = %+v, %v; want none", h, err)
		}
		if ok, err := db.ReleasePermits(ctx, res.Token, p.Owner); err != nil || !ok {
			t.Fatalf("release: %v, %v", ok, err)
		}
		if h, err := db.GrantOf(ctx, p.Name, p.Request); err != nil || h.Exists {
			t.Fatalf("GrantOf a released grant = %+v, %v; want none", h, err)
		}
	})
}
