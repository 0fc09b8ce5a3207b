package obs

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dblock-go/dblock/telemetry"
)

// ReaperInstruments are the reaper's instruments in one provider: every
// definition (name, unit, description) is here, once.
type ReaperInstruments struct {
	rows                          metric.Int64Counter
	passes, failures, skipped     metric.Int64Counter
	duration, oldestStale, lastOK metric.Float64Gauge
	held, waiters, dead           metric.Int64Gauge
}

// ReaperPass is what a pass that worked found and took.
type ReaperPass struct {
	Duration, OldestStale           time.Duration
	LocksHeld, Waiters, DeadWaiters int64
	At                              time.Time // when it ended
}

// NewReaperInstruments defines the reaper's instruments in p (nil: the
// global provider) and records their zero values, with rowKinds the kinds
// of rows counted, so that every series shows before the first pass.
func NewReaperInstruments(p metric.MeterProvider, rowKinds []string) (*ReaperInstruments, error) {
	if p == nil {
		p = otel.GetMeterProvider()
	}
	m := p.Meter(telemetry.ScopeName, metric.WithInstrumentationVersion(version()))
	var r ReaperInstruments
	var errs [10]error
	r.rows, errs[0] = m.Int64Counter(telemetry.ReaperRows, metric.WithUnit("{row}"),
		metric.WithDescription("Rows the reaper freed or deleted, by kind."))
	r.passes, errs[1] = m.Int64Counter(telemetry.ReaperPasses, metric.WithUnit("{pass}"),
		metric.WithDescription("Passes that held the reaper lease and succeeded."))
	r.failures, errs[2] = m.Int64Counter(telemetry.ReaperErrors, metric.WithUnit("{pass}"),
		metric.WithDescription("Passes that failed."))
	r.skipped, errs[3] = m.Int64Counter(telemetry.ReaperSkippedPasses, metric.WithUnit("{pass}"),
		metric.WithDescription("Passes skipped because another replica held the reaper lease."))
	r.duration, errs[4] = m.Float64Gauge(telemetry.ReaperPassDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of the last successful pass."))
	r.oldestStale, errs[5] = m.Float64Gauge(telemetry.ReaperOldestStaleAge, metric.WithUnit("s"),
		metric.WithDescription("Time since the oldest lease not yet freed expired, as the last successful pass found it (how far behind the reaper is)."))
	r.held, errs[6] = m.Int64Gauge(telemetry.ReaperLocksHeld, metric.WithUnit("{lock}"),
		metric.WithDescription("Unexpired leases, as the last successful pass found them."))
	r.waiters, errs[7] = m.Int64Gauge(telemetry.ReaperWaiters, metric.WithUnit("{waiter}"),
		metric.WithDescription("Live fair-queue waiters, as the last successful pass found them."))
	r.dead, errs[8] = m.Int64Gauge(telemetry.ReaperDeadWaiters, metric.WithUnit("{waiter}"),
		metric.WithDescription("Fair-queue waiters whose heartbeat stopped, as the last successful pass found them (before deleting them)."))
	r.lastOK, errs[9] = m.Float64Gauge(telemetry.ReaperLastSuccess, metric.WithUnit("s"),
		metric.WithDescription("Unix time of the last successful pass (0 before the first)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	r.zero(rowKinds)
	return &r, nil
}

func (r *ReaperInstruments) zero(rowKinds []string) {
	ctx := context.Background()
	for _, kind := range rowKinds {
		r.Rows(ctx, kind, 0)
	}
	r.passes.Add(ctx, 0)
	r.failures.Add(ctx, 0)
	r.skipped.Add(ctx, 0)
	r.gauges(ctx, ReaperPass{})
	r.lastOK.Record(ctx, 0)
}

// Rows counts n rows of kind.
func (r *ReaperInstruments) Rows(ctx context.Context, kind string, n int) {
	r.rows.Add(ctx, int64(n), metric.WithAttributes(attribute.String("kind", kind)))
}

// Failed counts a failed pass.
func (r *ReaperInstruments) Failed(ctx context.Context) { r.failures.Add(ctx, 1) }

// Skipped counts a pass skipped for another replica.
func (r *ReaperInstruments) Skipped(ctx context.Context) { r.skipped.Add(ctx, 1) }

// Passed counts a pass that worked and sets the gauges from it.
func (r *ReaperInstruments) Passed(ctx context.Context, p ReaperPass) {
	r.passes.Add(ctx, 1)
	r.gauges(ctx, p)
	r.lastOK.Record(ctx, float64(p.At.UnixMicro())/1e6)
}

func (r *ReaperInstruments) gauges(ctx context.Context, p ReaperPass) {
	r.duration.Record(ctx, p.Duration.Seconds())
	r.oldestStale.Record(ctx, p.OldestStale.Seconds())
	r.held.Record(ctx, p.LocksHeld)
	r.waiters.Record(ctx, p.Waiters)
	r.dead.Record(ctx, p.DeadWaiters)
}
