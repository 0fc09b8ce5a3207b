// Package rwlock provides read-write locks on the dblock_locks table: many
// readers or one writer per name, in the namespace every mode shares.
//
// A name held by readers is held for every exclusive mode (optimistic,
// fair, pessimistic and this package's writers), and a name held
// exclusively in any mode refuses readers. Readers share the name with the
// pessimistic mode's shared holds (pessimistic.Locker.AcquireShared) on
// PostgreSQL; on MySQL and MariaDB a reader waits for them whenever it
// writes the row (to begin a readers' period, and to release). Both sides are leases with the
// contract of the other modes: expiry by the database clock, renewal while
// held, Done and Err on loss, Release, Do.
//
//	l, _ := rwlock.New(db, nil)
//	readErr := l.DoRead(ctx, "catalog", func(ctx context.Context) error { return serve(ctx) })
//	writeErr := l.Do(ctx, "catalog", func(ctx context.Context) error { return rebuild(ctx) })
//
// Semantics:
//   - Writers are not starved: a writer waiting for readers keeps new
//     readers out (for a second or so after each of its tries, renewed
//     while it waits), so the readers drain and it enters. A reader that
//     holds the name already may re-enter meanwhile: it would otherwise
//     wait for a writer waiting for it. Between two writers, readers that
//     were waiting may enter first.
//   - Across processes, a writer waiting for a name held through another
//     Locker reserves it (see package optimistic): once the readers have
//     left, a reader of another owner does not start a new readers'
//     period until that writer took the name or the reservation lapsed.
//   - A writer's token is greater than every earlier token of the name.
//     Readers get the readers' token: one taken when readers begin to
//     hold a free name, shared by every reader until the name is free
//     again (or the token of the exclusive hold they downgrade).
//   - Downgrade: the owner of an exclusive hold (of any lease mode) may
//     take the read lock; its last exclusive release leaves the name to
//     readers, with no writer in between.
//   - Upgrade is refused: a read holder asking for the write lock gets
//     ErrUpgrade at once, never a wait on itself.
//   - Re-entry by owner, on both sides, as in the other modes.
//   - A reader that dies keeps writers out until its lease expires by the
//     database clock; the readers that remain keep theirs.
//   - A read acquire whose answer was lost (its connection broke) is read
//     back before anything else, each try bounded by a fifth of
//     Config.StatementTimeout, for StatementTimeout: the share it took is
//     returned as the lease; none taken, the call goes on; unreadable, a
//     try fails saying the outcome is unknown (the share may stand until
//     its lease expires), and a waiting call reads again before it asks,
//     so it never re-enters a share it cannot see.
//   - Config.Fair: waiters are served in arrival order (see Config.Fair):
//     they queue in dblock_waiters with the fair mode's waiters, a writer
//     behind everyone before it, a reader behind the writers before it.
//     An owner that holds the name already never queues.
//
// Every read statement runs in one short transaction that locks the
// name's row (PostgreSQL, MySQL) or the database (SQLite); on PostgreSQL a
// release locks the row only when it may be the last reader: while another
// reader's share reaches the end of the period, the release row-locks that
// share until its commit instead, and the releasers that find none count
// the readers left one at a time under a transaction-level advisory lock of
// the name (pg_advisory_xact_lock(1684171883, hashtext of the name): keep
// that class id out of your own advisory locks). On MariaDB the common
// reads and releases are plain statements, the rest procedures. It works
// behind PgBouncer in transaction mode like the lease modes. The write side is
// the optimistic mode's engine (one statement per try).
package rwlock
