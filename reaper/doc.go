// Package reaper cleans up dblock's tables on a cron schedule, usually as a
// sidecar (dblock reaper). Each pass:
//
//  1. frees leases that expired by the database clock (on PostgreSQL the same
//     statement notifies each freed name, waking its waiters);
//  2. deletes fair-queue waiters whose heartbeat deadline passed more than
//     Config.WaiterGrace ago;
//  3. deletes rows free for longer than Config.Retention, keeping fencing
//     tokens monotonic: on MySQL and SQLite the fencing floor is first raised
//     to the highest version deleted, and only rows at or below it are
//     deleted; on PostgreSQL tokens come from a sequence. On MySQL the raise
//     is a statement of its own, committed before the delete, that never
//     waits for the floor's row and holds it for that statement only
//     (acquisitions that meet it skip and retry at once).
//
// Every statement touches at most Config.BatchSize rows and skips rows that
// other transactions hold (SKIP LOCKED on PostgreSQL, MySQL 8 and MariaDB
// 10.6+), so foreground locking is never stalled and a pessimistic holder's
// row is neither waited on nor deleted. On SQLite, whose one write lock a
// batch holds, batches are sized to hold it about 20 ms. Conditions are
// re-checked by the database clock on the rows changed, so a holder renewing
// at the same moment keeps its lease. Batches repeat until one comes back
// short, with a short pause (Config.BatchPause) between full batches, so a
// large backlog is worked off without crowding out foreground locking.
//
// Several replicas are safe: a pass works only while it holds the lease
// named LeaseName ("dblock:reaper"), under an owner of its own (the
// replica's Config.Owner and a pass id), so passes never re-enter each
// other's lease, not even two passes of one Reaper. The lease is renewed
// before a batch when due, and no batch runs past its local deadline; a
// renewal that fails for a moment does not end a pass while the lease holds.
// A panic in a pass releases the lease.
//
// # Observability
//
// Each pass logs its counts (Info, or Debug when it found nothing to do).
// The reaper's OpenTelemetry instruments (package telemetry: rows per kind,
// passes, errors, duration, and the gauges a pass found before working: held
// leases, live and dead waiters, and the age of the oldest lease not yet
// freed) go to Config.Telemetry's meter provider (the global one by
// default), and Handler serves the same instruments in the Prometheus text
// format, through OpenTelemetry's Prometheus exporter, with /healthz,
// which fails when no pass succeeded for HealthyRuns (3) scheduled runs or
// the database does not answer.
//
// Freeing an expired lease is housekeeping, not a correctness step: an
// acquirer takes over an expired lease by itself. The reaper makes the table
// reflect the truth, wakes waiters on PostgreSQL and keeps the table small.
//
// Use RunOnce for one pass, or Start and Stop for the schedule:
//
//	r, err := reaper.New(db, &reaper.Config{Schedule: "@every 15s", Logger: logger})
//	if err != nil {
//		return err
//	}
//	if err := r.Check(ctx); err != nil {
//		return err // dblock.ErrSchemaMissing: run the migrations
//	}
//	mux.Handle("/", r.Handler()) // /metrics and /healthz, on your HTTP server
//	r.Start()
//	<-ctx.Done() // SIGTERM
//	return r.Stop(context.Background()) // the running batch finishes
package reaper
