package pessimistic_test

import (
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestIdleBoundRoundsUp reads the server's idle bound inside holds of
// several TTLs: the TTL rounded up, never down, to what the setting can say
// (PostgreSQL milliseconds; MariaDB whole seconds, at least 2, so that a
// keep-alive running every quarter of it may be 1.5 s late), as
// store.HoldBound computes it. It holds for a name added to a hold too.
func TestIdleBoundRoundsUp(t *testing.T) {
	t.Parallel()
	cases := map[store.Kind][]struct {
		ttl  time.Duration
		want int64 // ms on PostgreSQL, s on MariaDB.
	}{
		store.Postgres: {{1500*time.Millisecond + 500*time.Microsecond, 1501}, {2 * time.Second, 2000}, {3*time.Second + time.Microsecond, 3001}},
		store.MySQL:    {{10 * time.Millisecond, 2}, {time.Second, 2}, {1500 * time.Millisecond, 2}, {2*time.Second + time.Millisecond, 3}, {7 * time.Second, 7}},
	}
	for kind, cs := range cases {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx := testCtx(t)
			query, unit := "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'", time.Millisecond
			if kind == store.MySQL {
				query, unit = "SELECT @@SESSION.idle_transaction_timeout", time.Second
				if !iso.Store().MariaDB() {
					query = "SELECT @@SESSION.wait_timeout"
				}
			}
			l := newLocker(t, iso.DB, nil)
			for _, c := range cs {
				if got := iso.Store().HoldBound(c.ttl); got != time.Duration(c.want)*unit {
					t.Errorf("HoldBound(%v) = %v, want %v", c.ttl, got, time.Duration(c.want)*unit)
				}
				lease, err := l.Acquire(ctx, randName(t), dblock.WithTTL(c.ttl))
				if err != nil {
					t.Fatal(err)
				}
				var got int64
				if err := lease.Tx().QueryRowContext(ctx, query).Scan(&got); err != nil || got != c.want {
					t.Errorf("ttl %v: idle bound during the hold %d (%v), want %d", c.ttl, got, err, c.want)
				}
				if err := lease.Lock(ctx, randName(t), randName(t)); err != nil {
					t.Fatal(err)
				}
				if err := lease.Tx().QueryRowContext(ctx, query).Scan(&got); err != nil || got != c.want {
					t.Errorf("ttl %v: idle bound after locking more names %d (%v), want %d", c.ttl, got, err, c.want)
				}
				if err := lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
