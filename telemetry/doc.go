// Package telemetry names what dblock reports through OpenTelemetry, and
// holds the Config a Locker takes to choose where it goes.
//
// dblock uses only the OpenTelemetry API modules: nothing is recorded unless
// the application installs an SDK, either globally (otel.SetMeterProvider,
// otel.SetTracerProvider) or in a Locker's Config. The instrumentation scope
// is named ScopeName, with the module's version.
//
// Metrics (attributes dblock.mode and dblock.dialect on all of them; lock
// names never appear on metrics, since every name would be a new series):
//
//	dblock.acquire.duration  histogram, s   an Acquire or TryAcquire call, by dblock.outcome
//	dblock.wait.duration     histogram, s   the wait before an acquisition
//	dblock.hold.duration     histogram, s   acquisition to its end, by dblock.end (released, lost)
//	dblock.acquisitions      counter        locks acquired
//	dblock.losses            counter        leases lost, by dblock.loss.reason
//	dblock.renewal.failures  counter        renewals that failed (and were retried)
//	dblock.waiters           updowncounter  Acquire calls in progress
//
// Spans: dblock.acquire, dblock.release and dblock.do, with the mode, the
// lock name (see NamePolicy), the token and the outcome. There are no
// OpenTelemetry conventions for locks, so every name lives under dblock.;
// db.* is left to the SQL driver's instrumentation (otelpgx, otelsql).
package telemetry
