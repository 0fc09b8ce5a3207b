package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/telemetry"
)

// TestRenewalFailures: a holder whose connections stop answering counts
// its failed renewals, then loses the lease by expiry. (SQLite runs in
// process: there is no connection to stall.)
func TestRenewalFailures(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			dsn, proxy := locktest.StallProxy(t, iso)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			db, err := dialect.Open(ctx, dsn)
			must(t, err)
			defer db.Close()
			r := newRig(telemetry.NamesRaw)
			l, err := optimistic.New(db, &optimistic.Config{Telemetry: r.cfg, ReleaseTimeout: time.Second})
			must(t, err)
			defer l.Close()
			lease, err := l.Acquire(ctx, locktest.RandomName("otel-renew"), dblock.WithTTL(time.Second))
			must(t, err)
			proxy.Blackhole()
			select {
			case <-lease.Done():
			case <-ctx.Done():
				t.Fatal("a holder cut off from its database kept its lease")
			}
			c := &outcomeCheck{t: t, rig: r, attrs: []attribute.KeyValue{
				attribute.String(telemetry.AttrMode, dblock.ModeOptimistic), attribute.String(telemetry.AttrDialect, string(kind))}}
			c.eventually(ctx, telemetry.Losses, 1, attribute.String(telemetry.AttrReason, telemetry.ReasonExpired))
			if n := r.count(t, telemetry.RenewalFailures, c.attrs...); n < 1 {
				t.Errorf("%s: %d, want at least one failed renewal before the expiry", telemetry.RenewalFailures, n)
			}
		})
	}
}
