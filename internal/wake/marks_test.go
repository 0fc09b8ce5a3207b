package wake_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
)

// TestAnnouncedWhileMarked: a release announces its name only while a
// waiter's mark on the row is live. A raw listener, which marks nothing,
// reads every notice up to a barrier's (one connection delivers them in
// order): an unmarked name's release sends none, a marked one's does, and
// once the mark has lapsed none again.
func TestAnnouncedWhileMarked(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	iso := dbtest.New(t, store.Postgres)
	db := iso.Store()
	name, barrier := locktest.RandomName("marked"), locktest.RandomName("barrier")
	release(t, iso.DB, name)
	release(t, iso.DB, barrier)
	if exists, err := db.MarkListened(ctx, barrier, time.Minute); err != nil || !exists {
		t.Fatalf("mark the barrier: %v %v", exists, err)
	}
	l, err := db.Listen(ctx, store.NotifyChannel)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	announced := func() bool {
		t.Helper()
		release(t, iso.DB, name)
		release(t, iso.DB, barrier)
		seen := false
		for {
			payload, err := l.Wait(ctx)
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			if payload == barrier {
				return seen
			}
			seen = seen || payload == name
		}
	}
	if announced() {
		t.Fatal("the release of a name nobody marked was announced")
	}
	if exists, err := db.MarkListened(ctx, name, time.Second); err != nil || !exists {
		t.Fatalf("mark: %v %v", exists, err)
	}
	if !announced() {
		t.Fatal("the release of a marked name was not announced")
	}
	for lapsed := false; !lapsed; { // By the database clock.
		if err := iso.DB.SQL().QueryRowContext(ctx, "SELECT listened_until <= now() FROM dblock_locks WHERE name = $1", name).Scan(&lapsed); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if announced() {
		t.Fatal("a release was announced after its name's mark lapsed")
	}
}

// TestMarkMissingRow: MarkListened reports a name without a row, and a hub
// whose subscription found no row marks it once the row exists (at its next
// round), so that its release is announced.
func TestMarkMissingRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iso := dbtest.New(t, store.Postgres)
	name := locktest.RandomName("missing")
	if exists, err := iso.Store().MarkListened(ctx, name, time.Minute); err != nil || exists {
		t.Fatalf("mark a name without a row: %v %v; want false, nil", exists, err)
	}
	ch := shortMarks(t, iso, name)
	release(t, iso.DB, name) // Creates the row; announced or not.
	deadline := time.Now().Add(hangGuard)
	for {
		release(t, iso.DB, name)
		select {
		case <-ch:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("a subscription made before the row existed never marked it")
		}
	}
}

// TestMarkRenewed: while a name has subscriptions its hub renews the mark,
// and a release long after the first mark's lifetime is still announced.
func TestMarkRenewed(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	name := locktest.RandomName("renewed")
	release(t, iso.DB, name)
	ch := shortMarks(t, iso, name)
	first := listenedUntil(t, iso, name)
	time.Sleep(time.Second) // Two and a half lifetimes.
	if later := listenedUntil(t, iso, name); !later.After(first) {
		t.Fatalf("mark not renewed: %v, then %v", first, later)
	}
	release(t, iso.DB, name)
	wait(t, ch, "release after renewals")
}

// shortMarks subscribes to name on a new hub of iso whose marks last
// 400 ms, once its listening connection is up.
func shortMarks(t *testing.T, iso *dbtest.Isolated, name string) <-chan struct{} {
	t.Helper()
	hub := wake.New(iso.Store(), nil)
	wake.SetMarkFor(hub, 400*time.Millisecond)
	ch, unsubscribe := hub.Subscribe(context.Background(), name)
	t.Cleanup(func() { unsubscribe(); _ = hub.Close() })
	wait(t, ch, "first connection")
	return ch
}

// listenedUntil reads name's mark.
func listenedUntil(t *testing.T, iso *dbtest.Isolated, name string) time.Time {
	t.Helper()
	var at time.Time
	if err := iso.DB.SQL().QueryRowContext(context.Background(), "SELECT listened_until FROM dblock_locks WHERE name = $1", name).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestSubscribeUnmarked: a subscription for a name whose releases are
// announced anyway (a semaphore's) writes no mark, at once or at the hub's
// rounds, and still hears the name's notices.
func TestSubscribeUnmarked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iso := dbtest.New(t, store.Postgres)
	name := locktest.RandomName("unmarked")
	release(t, iso.DB, name)
	hub := wake.New(iso.Store(), nil)
	wake.SetMarkFor(hub, 400*time.Millisecond)
	ch, unsubscribe := hub.SubscribeUnmarked(name)
	t.Cleanup(func() { unsubscribe(); _ = hub.Close() })
	wait(t, ch, "first connection")
	time.Sleep(300 * time.Millisecond) // Three of the hub's rounds.
	var marked bool
	if err := iso.DB.SQL().QueryRowContext(ctx, "SELECT listened_until IS NOT NULL FROM dblock_locks WHERE name = $1", name).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	if marked {
		t.Fatal("an unmarked subscription marked the name's row")
	}
	if _, err := iso.DB.SQL().ExecContext(ctx, "SELECT pg_notify($1, $2)", store.NotifyChannel, name); err != nil {
		t.Fatal(err)
	}
	wait(t, ch, "a notice of the name")
}
