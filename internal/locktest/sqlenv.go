package locktest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// sqlEnv is a test database behind the Lockers of a mode's Factory.
type sqlEnv struct {
	iso     *dbtest.Isolated
	factory Factory
}

func (e *sqlEnv) Locker(t *testing.T, other bool) dblock.Locker {
	t.Helper()
	if !other {
		return e.factory(t, e.iso)
	}
	iso2 := &dbtest.Isolated{Kind: e.iso.Kind, DSN: e.iso.DSN, DB: e.iso.Open(t)}
	noConnsInUse(t, store.Of(iso2.DB), "the other Locker's pool")
	return e.factory(t, iso2)
}

func (e *sqlEnv) TakeOver(t *testing.T, ctx context.Context, name, owner string) {
	t.Helper()
	k := e.iso.Kind
	r, err := e.iso.Store().ExecContext(ctx, "UPDATE dblock_locks SET owner = "+ph(k, 1)+", version = version + 1 WHERE name = "+ph(k, 2)+" AND owner IS NOT NULL",
		owner, name)
	if err != nil {
		t.Fatalf("take the row over: %v", err)
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("take the row over: %d rows (%v), want 1", n, err)
	}
}

func (e *sqlEnv) HolderOwner(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	h, err := e.iso.Store().LeaseHolder(ctx, nil, name)
	if err != nil {
		t.Fatalf("read %q: %v", name, err)
	}
	return h.Owner
}

func (e *sqlEnv) ForceRelease(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if ok, err := e.iso.Store().ForceRelease(ctx, nil, name); err != nil || !ok {
		t.Fatalf("force release: %v %v", ok, err)
	}
}

func (e *sqlEnv) WaitExpired(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	e.iso.WaitExpired(t, ctx, name)
}

func (e *sqlEnv) ReleaseAs(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	return e.iso.Store().ReleaseLease(ctx, nil, name, owner, token)
}

// Reap runs the reaper's idle-row deletion until name's row is gone.
func (e *sqlEnv) Reap(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	k := e.iso.Kind
	for attempt := 0; ; attempt++ {
		if _, err := e.iso.Store().ReapIdle(ctx, store.ReapParams{Limit: 1000}); err != nil {
			t.Fatalf("reap idle rows: %v", err)
		}
		var n int
		if err := e.iso.Store().GetContext(ctx, &n, "SELECT count(*) FROM dblock_locks WHERE name = "+ph(k, 1), name); err != nil {
			t.Fatalf("count %q: %v", name, err)
		}
		if n == 0 {
			return
		}
		if attempt == 50 {
			t.Fatalf("the reaper did not delete the idle row of %q", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *sqlEnv) Residue(t *testing.T) (names, held, waiters int) {
	t.Helper()
	return countRows(t, e.iso, "dblock_locks", ""), countRows(t, e.iso, "dblock_locks", "owner IS NOT NULL"),
		countRows(t, e.iso, "dblock_waiters", "")
}

func (e *sqlEnv) InUse() int { return e.iso.Store().Stats().InUse }

// ph returns the n-th bind marker of kind.
func ph(kind store.Kind, n int) string {
	if kind == store.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}
