package telemetry

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of dblock's meter and tracer.
const ScopeName = "github.com/dblock-go/dblock"

// Instrument names.
const (
	AcquireDuration = "dblock.acquire.duration"
	WaitDuration    = "dblock.wait.duration"
	HoldDuration    = "dblock.hold.duration"
	Acquisitions    = "dblock.acquisitions"
	Losses          = "dblock.losses"
	RenewalFailures = "dblock.renewal.failures"
	Waiters         = "dblock.waiters"
)

// The reaper's instruments (package reaper; its Handler serves them in the
// Prometheus text format as dblock_reaper_rows_total, ..._passes_total,
// ..._errors_total, ..._skipped_passes_total, ..._pass_duration_seconds,
// ..._oldest_stale_age_seconds, ..._locks_held, ..._waiters,
// ..._dead_waiters and ..._last_success_timestamp_seconds).
const (
	ReaperRows           = "dblock.reaper.rows" // by kind: expired_freed, waiters_deleted, idle_deleted, history_pruned, shares_deleted, grants_deleted, semaphores_deleted
	ReaperPasses         = "dblock.reaper.passes"
	ReaperErrors         = "dblock.reaper.errors"
	ReaperSkippedPasses  = "dblock.reaper.skipped_passes"
	ReaperPassDuration   = "dblock.reaper.pass_duration"
	ReaperOldestStaleAge = "dblock.reaper.oldest_stale_age"
	ReaperLocksHeld      = "dblock.reaper.locks_held"
	ReaperWaiters        = "dblock.reaper.waiters"
	ReaperDeadWaiters    = "dblock.reaper.dead_waiters"
	ReaperLastSuccess    = "dblock.reaper.last_success_timestamp"
)

// Attribute keys.
const (
	AttrMode    = "dblock.mode"        // optimistic, pessimistic, fair
	AttrDialect = "dblock.dialect"     // postgres, mysql, sqlite
	AttrOutcome = "dblock.outcome"     // see the Outcome constants
	AttrEnd     = "dblock.end"         // released, lost
	AttrReason  = "dblock.loss.reason" // see the Reason constants
	AttrName    = "dblock.lock.name"   // spans only, per NamePolicy
	AttrToken   = "dblock.token"       // spans only
)

// Outcomes of an acquire call (AttrOutcome).
const (
	OutcomeAcquired    = "acquired"    // the lock was taken
	OutcomeBusy        = "busy"        // held by another owner: a try, or a wait that ran out
	OutcomeCanceled    = "canceled"    // the caller's context ended the wait
	OutcomeInvalid     = "invalid"     // a bad name or option
	OutcomeClosed      = "closed"      // the Locker was closed
	OutcomeUnavailable = "unavailable" // the database could not be reached
	OutcomeError       = "error"       // anything else
)

// Reasons of a loss (AttrReason).
const (
	ReasonExpired        = "expired"
	ReasonTakenOver      = "taken_over"
	ReasonForceReleased  = "force_released"
	ReasonConnectionLost = "connection_lost"
	ReasonClosed         = "closed"
	ReasonDeadlock       = "deadlock"
	ReasonOther          = "other"
)

// NamePolicy says how lock names appear on spans. Names can carry customer
// ids; metrics never carry them.
type NamePolicy int

const (
	// NamesRaw records the name as given (the default).
	NamesRaw NamePolicy = iota
	// NamesHashed records the first 16 hex digits of the name's SHA-256,
	// so spans of one name can still be matched.
	NamesHashed
	// NamesDropped records no name.
	NamesDropped
)

// Config chooses where a Locker's metrics and spans go. A nil *Config means
// the global providers and raw names.
type Config struct {
	// MeterProvider defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Names is how lock names appear on spans. Defaults to NamesRaw.
	Names NamePolicy
}
