package pessimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
)

// TestCancelledWaitLetsGoFirst: once an Acquire whose context ended has
// returned, its server session neither waits for the row nor runs a lock
// statement still in flight, so a release right after leaves the name to
// the next NOWAIT. The context ends 20 ms in: some cycles end in the wait,
// some in the NOWAIT before it (on a new connection). On PostgreSQL pgx's
// cancel of the cut-off statement travels on a connection of its own after
// the call has returned; before the session was ended from the Locker's
// connection, a release in between left the row to it (2 runs in 3 failed).
func TestCancelledWaitLetsGoFirst(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		holderL := newLocker(t, iso.DB, nil)
		waiterL := newLocker(t, iso.Open(t), nil)
		for i := range 25 {
			name := randName(t)
			holder, err := holderL.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err = waiterL.Acquire(wctx, name)
			if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v, want ErrNotAcquired and context.Canceled", err)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			again, err := holderL.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("cycle %d: try right after the release: %v, want the name free", i, err)
			}
			if err := again.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
