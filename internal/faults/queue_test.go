package faults

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
)

// checkQueueDrained waits (at most 15 s) until name has no live waiter rows
// (heartbeat deadline in the future, by the database clock) once every
// waiter process is dead, then lets the reaper (when one is registered)
// delete the dead rows and checks that none remain.
func checkQueueDrained(t *testing.T, iso *dbtest.Isolated, name string) {
	t.Helper()
	d := iso.Store().Dialect
	q := "SELECT count(*) FROM dblock_waiters WHERE name = " + d.Placeholder(1) + " AND expires_at > " + d.Now()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		err := iso.Store().GetContext(ctx, &n, q, name)
		cancel()
		if err != nil {
			t.Fatalf("count live waiters: %v", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d live waiter rows for %q 15 s after every waiter was killed", n, name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if reapOnce == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reapOnce(ctx, iso); err != nil {
		t.Fatalf("reaper pass: %v", err)
	}
	var n int
	if err := iso.Store().GetContext(ctx, &n, "SELECT count(*) FROM dblock_waiters WHERE name = "+d.Placeholder(1), name); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d dead waiter rows for %q left after a reaper pass", n, name)
	}
}

// reapOnce runs one reaper pass on iso; nil until the reaper package lands
// (set in modes_test.go).
var reapOnce func(ctx context.Context, iso *dbtest.Isolated) error
