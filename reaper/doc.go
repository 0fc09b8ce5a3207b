// Package reaper cleans up dblock's tables on a cron schedule, usually as a
// sidecar (dblock reaper). Each pass:
//
//  1. frees leases that expired by the database clock (on PostgreSQL the same
//     statement notifies each freed name, waking its waiters);
//  2. deletes fair-queue waiters whose heartbeat deadline passed more than
//     Config.WaiterGrace ago;
//  3. deletes rows free for longer than Config.Retention, keeping fencing
//     tokens monotonic: on MySQL and SQLite the same transaction first raises
//     the fencing floor to the highest version it deletes; on PostgreSQL
//     tokens come from a sequence.
//
// Every statement touches at most Config.BatchSize rows and skips rows that
// other transactions hold (SKIP LOCKED on PostgreSQL, MySQL 8 and MariaDB
// 10.6+), so foreground locking is never stalled and a pessimistic holder's
// row is neither waited on nor deleted. Conditions are re-checked by the
// database clock on the rows changed, so a holder renewing at the same moment
// keeps its lease. Batches repeat until one comes back short, with a short
// pause (Config.BatchPause) between full batches, so a large backlog is
// worked off without crowding out foreground locking.
//
// Several replicas are safe: a pass works only while its replica holds the
// lease named LeaseName ("dblock:reaper"), renewed between batches; the other
// replicas skip the pass.
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
//	go http.ListenAndServe(":9090", r.Handler()) // /metrics and /healthz
//	r.Start()
//	<-ctx.Done() // SIGTERM
//	return r.Stop(context.Background()) // the running batch finishes
package reaper
