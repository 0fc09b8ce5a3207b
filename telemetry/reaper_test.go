package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/reaper"
	"github.com/dblock-go/dblock/telemetry"
)

// TestReaperInstruments: the reaper records its instruments into the
// Config's provider (the ones its Handler serves): a pass that frees an
// expired lease counts the pass and the row, and sets the gauges.
func TestReaperInstruments(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		r := newRig(telemetry.NamesRaw)
		rp, err := reaper.New(iso.DB, &reaper.Config{Telemetry: r.cfg})
		must(t, err)
		if n := r.count(t, telemetry.ReaperPasses); n != 0 {
			t.Fatalf("%s before any pass: %d", telemetry.ReaperPasses, n)
		}
		expireOne(t, ctx, iso)
		st, err := rp.RunOnce(ctx)
		must(t, err)
		if st.ExpiredFreed != 1 {
			t.Fatalf("the pass freed %d expired leases, want 1", st.ExpiredFreed)
		}
		if n := r.count(t, telemetry.ReaperPasses); n != 1 {
			t.Errorf("%s: %d, want 1", telemetry.ReaperPasses, n)
		}
		if n := r.count(t, telemetry.ReaperRows, attribute.String("kind", "expired_freed")); n != 1 {
			t.Errorf("%s{kind=expired_freed}: %d, want 1", telemetry.ReaperRows, n)
		}
		if _, ok := r.collect(t)[telemetry.ReaperLastSuccess]; !ok {
			t.Errorf("%s not recorded", telemetry.ReaperLastSuccess)
		}
	})
}

// expireOne leaves one expired lease in the table: its max hold runs out,
// which ends it without freeing its row, and the database's clock passes
// its expiry.
func expireOne(t *testing.T, ctx context.Context, iso *dbtest.Isolated) {
	t.Helper()
	l, err := optimistic.New(iso.DB, nil)
	must(t, err)
	// Closed after the test's pass: a Close racing the lease's end (its
	// Done closes before the Locker forgets it) may free the row itself.
	t.Cleanup(func() { _ = l.Close() })
	name := locktest.RandomName("otel-reap")
	lease, err := l.Acquire(ctx, name, dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
	must(t, err)
	<-lease.Done()
	iso.WaitExpired(t, ctx, name)
}
