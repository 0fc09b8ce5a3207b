package obs

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/telemetry"
)

// Recorder holds one Locker's instruments and tracer, with the attribute
// sets of its mode and dialect built once, so recording allocates nothing.
type Recorder struct {
	mode   string
	names  telemetry.NamePolicy
	tracer trace.Tracer
	// global: the tracer is the global provider's, and spans start only
	// once the application has installed one (see tracing).
	global bool

	acquireDur, waitDur, holdDur     metric.Float64Histogram
	acquisitions, losses, renewFails metric.Int64Counter
	waiters                          metric.Int64UpDownCounter

	base      attrs            // mode, dialect
	outcomes  map[string]attrs // + dblock.outcome
	reasons   map[string]attrs // + dblock.loss.reason
	released  attrs            // + dblock.end=released
	lost      attrs            // + dblock.end=lost
	modeAttr  attribute.KeyValue
	spanStart []trace.SpanStartOption
}

var (
	outcomeNames = []string{telemetry.OutcomeAcquired, telemetry.OutcomeBusy, telemetry.OutcomeCanceled,
		telemetry.OutcomeInvalid, telemetry.OutcomeClosed, telemetry.OutcomeUnavailable, telemetry.OutcomeError}
	reasonNames = []string{telemetry.ReasonExpired, telemetry.ReasonTakenOver, telemetry.ReasonForceReleased,
		telemetry.ReasonConnectionLost, telemetry.ReasonClosed, telemetry.ReasonDeadlock, telemetry.ReasonOther}
)

// New returns the Recorder of a Locker of mode on a database of dialect.
// A nil cfg means the global providers and raw names; a name policy out of
// range is an error wrapping dblock.ErrInvalidOption.
func New(cfg *telemetry.Config, dialect, mode string) (*Recorder, error) {
	var c telemetry.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Names < telemetry.NamesRaw || c.Names > telemetry.NamesDropped {
		return nil, fmt.Errorf("%w: telemetry name policy %d", dblock.ErrInvalidOption, c.Names)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	r := &Recorder{mode: mode, names: c.Names, modeAttr: attribute.String(telemetry.AttrMode, mode)}
	if c.TracerProvider == nil {
		c.TracerProvider, r.global = otel.GetTracerProvider(), true
	}
	r.tracer = c.TracerProvider.Tracer(telemetry.ScopeName, trace.WithInstrumentationVersion(version()))
	r.spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if err := r.instruments(c.MeterProvider.Meter(telemetry.ScopeName, metric.WithInstrumentationVersion(version()))); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	r.attributeSets(dialect)
	return r, nil
}

func (r *Recorder) instruments(m metric.Meter) error {
	var errs [7]error
	r.acquireDur, errs[0] = m.Float64Histogram(telemetry.AcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of an Acquire or TryAcquire call."))
	r.waitDur, errs[1] = m.Float64Histogram(telemetry.WaitDuration, metric.WithUnit("s"),
		metric.WithDescription("Time waited before an acquisition."))
	r.holdDur, errs[2] = m.Float64Histogram(telemetry.HoldDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition to its release or loss."))
	r.acquisitions, errs[3] = m.Int64Counter(telemetry.Acquisitions, metric.WithUnit("{acquisition}"),
		metric.WithDescription("Locks acquired."))
	r.losses, errs[4] = m.Int64Counter(telemetry.Losses, metric.WithUnit("{loss}"),
		metric.WithDescription("Leases lost before their release."))
	r.renewFails, errs[5] = m.Int64Counter(telemetry.RenewalFailures, metric.WithUnit("{failure}"),
		metric.WithDescription("Lease renewals that failed."))
	r.waiters, errs[6] = m.Int64UpDownCounter(telemetry.Waiters, metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls in progress."))
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Recorder) attributeSets(dialect string) {
	d := attribute.String(telemetry.AttrDialect, dialect)
	with := func(kv ...attribute.KeyValue) attrs {
		o := metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{r.modeAttr, d}, kv...)...))
		return attrs{rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
	}
	r.base = with()
	r.outcomes = make(map[string]attrs, len(outcomeNames))
	for _, o := range outcomeNames {
		r.outcomes[o] = with(attribute.String(telemetry.AttrOutcome, o))
	}
	r.reasons = make(map[string]attrs, len(reasonNames))
	for _, o := range reasonNames {
		r.reasons[o] = with(attribute.String(telemetry.AttrReason, o))
	}
	r.released = with(attribute.String(telemetry.AttrEnd, "released"))
	r.lost = with(attribute.String(telemetry.AttrEnd, "lost"))
}

// attrs is one attribute set as the options of Record and Add, built once
// so that recording allocates nothing.
type attrs struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

// defaultTracers is the global provider before any application set one:
// it only hands out spans that record nothing.
var defaultTracers = otel.GetTracerProvider()

// tracing reports whether a span started now could record: always for a
// provider the Config named, and for the global one once the application
// has replaced the default. Until then no span is started at all, which
// saves the two allocations of a non-recording span per call.
func (r *Recorder) tracing() bool {
	return !r.global || otel.GetTracerProvider() != defaultTracers
}

// record adds v to h with a, when an SDK listens.
func record(ctx context.Context, h metric.Float64Histogram, v float64, a attrs) {
	if h.Enabled(ctx) {
		h.Record(ctx, v, a.rec...)
	}
}

// add adds n to c with a, when an SDK listens.
func add(ctx context.Context, c metric.Int64Counter, n int64, a attrs) {
	if c.Enabled(ctx) {
		c.Add(ctx, n, a.add...)
	}
}
