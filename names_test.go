package dblock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// badNames are refused by every call that takes a name, on every database,
// before anything reaches the database.
var badNames = map[string]string{
	"empty":         "",
	"too long":      strings.Repeat("n", dblock.MaxNameLen+1),
	"invalid UTF-8": "job-\xff\xfe",
	"NUL byte":      "job\x00x",
}

// TestEveryNameIsValidated calls every exported function that takes a lock
// name with each bad name and expects ErrInvalidName, and no row written.
func TestEveryNameIsValidated(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m := newModes(t, iso)
		opt, fair, pess := m.opt, m.fair, m.pess
		held, err := pess.TryAcquire(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		noop := func(context.Context) error { return nil }
		calls := namedCalls(ctx, opt, fair, pess, held, iso, noop)
		for what, name := range badNames {
			for call, fn := range calls {
				if err := fn(name); !errors.Is(err, dblock.ErrInvalidName) {
					t.Errorf("%s with a name %s: %v, want ErrInvalidName", call, what, err)
				}
			}
		}
		var rows int
		if err := iso.Store().GetContext(ctx, &rows,
			"SELECT (SELECT COUNT(*) FROM dblock_locks WHERE name <> 'held') + (SELECT COUNT(*) FROM dblock_waiters)"); err != nil {
			t.Fatal(err)
		}
		if rows != 0 {
			t.Fatalf("calls with bad names wrote %d rows", rows)
		}
	})
}

func namedCalls(ctx context.Context, opt *optimistic.Locker, fair *fairqueue.Locker, pess *pessimistic.Locker,
	held *pessimistic.Lease, iso *dbtest.Isolated, noop func(context.Context) error) map[string]func(string) error {
	lease := func(_ *dblock.Lease, err error) error { return err }
	many := func(_ []*dblock.Lease, err error) error { return err }
	plock := func(_ *pessimistic.Lease, err error) error { return err }
	waiters := func(_ []fairqueue.Waiter, err error) error { return err }
	return map[string]func(string) error{
		"optimistic Acquire":        func(n string) error { return lease(opt.Acquire(ctx, n)) },
		"optimistic TryAcquire":     func(n string) error { return lease(opt.TryAcquire(ctx, n)) },
		"optimistic Do":             func(n string) error { return opt.Do(ctx, n, noop) },
		"optimistic AcquireMany":    func(n string) error { return many(opt.AcquireMany(ctx, []string{"ok", n})) },
		"optimistic TryAcquireMany": func(n string) error { return many(opt.TryAcquireMany(ctx, []string{"ok", n})) },
		"fair Acquire":              func(n string) error { return lease(fair.Acquire(ctx, n)) },
		"fair TryAcquire":           func(n string) error { return lease(fair.TryAcquire(ctx, n)) },
		"fair Do":                   func(n string) error { return fair.Do(ctx, n, noop) },
		"fair Queue":                func(n string) error { return waiters(fair.Queue(ctx, n)) },
		"fairqueue.Queue":           func(n string) error { return waiters(fairqueue.Queue(ctx, iso.DB, n)) },
		"fair Position": func(n string) error {
			_, _, err := fair.Position(ctx, n, "owner")
			return err
		},
		"pessimistic Acquire":        func(n string) error { return plock(pess.Acquire(ctx, n)) },
		"pessimistic TryAcquire":     func(n string) error { return plock(pess.TryAcquire(ctx, n)) },
		"pessimistic AcquireMany":    func(n string) error { return plock(pess.AcquireMany(ctx, []string{"ok", n})) },
		"pessimistic TryAcquireMany": func(n string) error { return plock(pess.TryAcquireMany(ctx, []string{"ok", n})) },
		"pessimistic Do": func(n string) error {
			return pess.Do(ctx, n, func(context.Context, *sql.Tx) error { return nil })
		},
		"pessimistic adapter Do":    func(n string) error { return pess.AsLocker().Do(ctx, n, noop) },
		"pessimistic Lease.Lock":    func(n string) error { return held.Lock(ctx, n) },
		"pessimistic Lease.TryLock": func(n string) error { return held.TryLock(ctx, n) },
	}
}
