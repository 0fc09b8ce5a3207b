package fairqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
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
	dbtest.ForEach(t, testUnannouncedMove)
}

func testUnannouncedMove(t *testing.T, iso *dbtest.Isolated) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := "unannounced-move"
	holder, err := fairqueue.New(iso.Open(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	// Held for an hour; the statements below free the name under it.
	if _, err := holder.Acquire(ctx, name, dblock.WithTTL(time.Hour), dblock.WithMaxHold(time.Hour)); err != nil {
		t.Fatal(err)
	}
	dbtest.AddWaiter(t, iso.DB, name, "other-process", time.Hour)

	fair, err := fairqueue.New(iso.Open(t), &fairqueue.Config{HeadPollMax: 2 * time.Minute, PollMax: 2 * time.Minute, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fair.Close() })
	done := queueSecond(ctx, t, fair, name)
	time.Sleep(200 * time.Millisecond) // A few of its sleeps go by.

	// The other process's waiter took the name and gave it back: its row
	// went, and the lock row is free. Nothing tells this process.
	db := iso.Store()
	for _, q := range []string{
		`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL WHERE name = ?`,
		`DELETE FROM dblock_waiters WHERE name = ? AND owner = 'other-process'`,
	} {
		if _, err := db.ExecContext(ctx, db.Rebind(q), name); err != nil {
			t.Fatal(err)
		}
	}
	awaitTake(t, done, "the waiter did not look again after the queue moved unannounced")
}
