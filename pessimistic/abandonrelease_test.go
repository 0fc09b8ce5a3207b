package pessimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestCancelledWaitLetsGoFirst: once an Acquire whose context ended has
// returned, its server session neither waits for the row nor runs a lock
// statement still in flight, so a release right after leaves the name to
// the next NOWAIT. On PostgreSQL the context ends 20 ms in: some cycles end
// in the wait, some in the NOWAIT before it (on a new connection). pgx's
// cancel of the cut-off statement travels on a connection of its own after
// the call has returned; before the session was ended from the Locker's
// connection, a release in between left the row to it (2 runs in 3 failed).
// On MySQL and MariaDB only the wait's session is ended (a NOWAIT cut off
// in flight ends when the server notices the closed connection), so the
// context ends 150 ms in, in the wait.
func TestCancelledWaitLetsGoFirst(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		holderL := newLocker(t, iso.DB, nil)
		waiterL := newLocker(t, iso.Open(t), nil)
		cancelAfter := 20 * time.Millisecond
		if iso.Kind == store.MySQL {
			cancelAfter = 150 * time.Millisecond
		}
		for i := range 25 {
			name := randName(t)
			holder, err := holderL.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(cancelAfter, cancel)
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
