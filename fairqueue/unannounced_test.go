package fairqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
)

// TestUnannouncedMove: where no notification announces the queue's moves
// (MySQL, MariaDB, SQLite, and PostgreSQL with Config.DisableNotify), a
// waiter second in line learns that the waiter ahead of it left, and the
// lock was freed, in another process only from its own checks. It must
// look again about a hand-off later (its first sleep is PollMin per place
// ahead, doubling while the queue stands still), not at a base of
// HeadPollMax per place, which the test sets far beyond its guard: a queue
// spread over processes would move one place per HeadPollMax. (With
// notifications, TestMergedNotifications.)
func TestUnannouncedMove(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		name := "unannounced-move"
		// Held for an hour; the statements below free the name under it.
		holdBehind(ctx, t, iso, name, "other-process")
		done := queueSecond(ctx, t, slowTimers(t, iso, true), name)
		time.Sleep(200 * time.Millisecond) // A few of its sleeps go by.

		// The other process's waiter took the name and gave it back: its
		// row went, and the lock row is free. Nothing tells this process.
		db := iso.Store()
		for _, q := range []string{
			`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL WHERE name = ?`,
			`DELETE FROM dblock_waiters WHERE name = ? AND owner = 'other-process'`,
		} {
			if _, err := db.ExecContext(ctx, db.Rebind(q), name); err != nil {
				t.Fatal(err)
			}
		}
		if err := awaitTake(done); err != nil {
			t.Fatalf("the waiter did not take the name after the queue moved unannounced: %v", err)
		}
	})
}
