package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// UntilQueued waits until n live waiters queue for name in the way of a
// newcomer of kind (store.PeekGate: for store.WaitExclusive, every
// waiter of the lock; for store.WaitSemaphore, the semaphore's requests),
// and fails t after 20 s.
func UntilQueued(t testing.TB, iso *Isolated, name string, kind store.WaitKind, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := iso.Store().PeekGate(context.Background(), name, kind, "")
		if err != nil {
			t.Fatalf("peek at the queue of %q: %v", name, err)
		}
		if s.Queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued for %q, want %d", s.Queued, name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
