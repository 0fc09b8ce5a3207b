package wake_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

// hangGuard bounds waits; it is not a timing assertion.
const hangGuard = 60 * time.Second

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("no wake-up: %s", what)
	}
}

// release takes and frees name on db, which announces the release.
func release(t *testing.T, db *dialect.DB, name string) {
	t.Helper()
	ctx := context.Background()
	r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil || !r.Acquired {
		t.Fatalf("acquire %s: %+v %v", name, r, err)
	}
	if ok, err := store.Of(db).ReleaseLease(ctx, nil, name, "o", r.Token); err != nil || !ok {
		t.Fatalf("release %s: %v %v", name, ok, err)
	}
}

func TestHubPostgres(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	hub := wake.New(iso.Store(), nil)
	name, other := locktest.RandomName("wake"), locktest.RandomName("wake-other")
	pool := iso.Open(t)
	release(t, pool, name) // The row exists, as a waiter finds it, so that Subscribe marks it.
	ch, cancel := hub.Subscribe(context.Background(), name)
	defer cancel()
	// The first connection wakes everyone subscribed before it (releases
	// before it were missed). The second subscription comes after that
	// wake-up: made right after the first, it raced the connection, and a
	// subscriber that came later is not woken (it missed nothing).
	wait(t, ch, "first connection")
	otherCh, cancelOther := hub.Subscribe(context.Background(), other)
	defer cancelOther()

	release(t, pool, name)
	wait(t, ch, "release of the subscribed name")
	select {
	case <-otherCh:
		t.Fatalf("a release of %s woke the subscriber of %s", name, other)
	default:
	}

	// Kill the listening session: the hub reconnects and wakes everyone.
	ctx := context.Background()
	res, err := pool.SQL().ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name = current_setting('application_name') AND query = 'LISTEN "dblock"' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatalf("terminate listener: %v", err)
	}
	if n, _ := res.RowsAffected(); n < 1 {
		t.Fatalf("no listening session found")
	}
	wait(t, otherCh, "reconnect")
	release(t, pool, name)
	wait(t, ch, "release after reconnect")

	cancel()
	if err := hub.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := iso.Store().Stats().InUse; n != 0 {
		t.Fatalf("%d connections in use after Close", n)
	}
	// Subscribing after Close is harmless.
	_, c := hub.Subscribe(ctx, name)
	c()
}

func TestHubNoNotify(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.MySQL, store.SQLite} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			hub := wake.New(iso.Store(), nil)
			ch, cancel := hub.Subscribe(context.Background(), "x")
			release(t, iso.DB, "x")
			select {
			case <-ch:
				t.Fatalf("a hub without notifications woke a subscriber")
			default:
			}
			cancel()
			if err := hub.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if n := iso.Store().Stats().InUse; n != 0 {
				t.Fatalf("%d connections in use after Close", n)
			}
		})
	}
}

// TestHubCountsMergedNotices (PostgreSQL): releases announced while a
// wake-up is pending merge in the subscription's channel, and each is
// counted (SubscribeCounted), so a waiter that needs n events never stops
// short of them.
func TestHubCountsMergedNotices(t *testing.T) {
	t.Parallel()
	c := newCounted(t, "wake-count", nil)
	base := c.sent()
	const releases = 20
	for range releases {
		release(t, c.pool, c.name) // The channel is not read meanwhile.
	}
	c.waitCount(base, releases)
	wait(t, c.ch, "the merged wake-up")
	select {
	case <-c.ch:
		t.Fatalf("the channel held more than one wake-up")
	default:
	}
}

// TestHubQuietCounts (PostgreSQL): a notice that arrives while the
// subscription's quiet test says the waiter would go back to sleep on it
// is counted and wakes nobody; once the test says otherwise, notices wake
// the waiter again.
func TestHubQuietCounts(t *testing.T) {
	t.Parallel()
	var quiet atomic.Bool
	c := newCounted(t, "wake-quiet", quiet.Load)
	quiet.Store(true)
	base := c.sent()
	const releases = 5
	for range releases {
		release(t, c.pool, c.name)
	}
	c.waitCount(base, releases)
	select {
	case <-c.ch:
		t.Fatalf("a quiet notice woke the waiter")
	default:
	}
	quiet.Store(false)
	release(t, c.pool, c.name)
	wait(t, c.ch, "a notice once no longer quiet")
	if n := c.sent() - base; n != releases+1 {
		t.Fatalf("%d notices counted for %d releases", n, releases+1)
	}
}

// counted is a counted subscription (SubscribeCounted) to a name of its
// own, on a hub of an isolated PostgreSQL database, past its first
// connection's wake-up; pool releases the name.
type counted struct {
	t    *testing.T
	name string
	pool *dialect.DB
	ch   <-chan struct{}
	sent func() uint64
}

// newCounted subscribes to a new name (prefix) with quiet; the test's
// cleanup cancels the subscription and closes the hub.
func newCounted(t *testing.T, prefix string, quiet func() bool) *counted {
	t.Helper()
	iso := dbtest.New(t, store.Postgres)
	hub := wake.New(iso.Store(), nil)
	t.Cleanup(func() { _ = hub.Close() })
	c := &counted{t: t, name: locktest.RandomName(prefix), pool: iso.Open(t)}
	release(t, c.pool, c.name)
	var cancel func()
	c.ch, c.sent, cancel = hub.SubscribeCounted(context.Background(), c.name, quiet)
	t.Cleanup(cancel)
	wait(t, c.ch, "first connection")
	return c
}

// waitCount waits until n notices are counted past base, and fails the
// test if the count ends elsewhere.
func (c *counted) waitCount(base uint64, n int) {
	c.t.Helper()
	deadline := time.Now().Add(hangGuard)
	for c.sent()-base < uint64(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := c.sent() - base; got != uint64(n) {
		c.t.Fatalf("%d notices counted for %d releases", got, n)
	}
}
