// Package pessimistic takes locks that a database transaction holds: a row
// lock (SELECT ... FOR UPDATE) on the name's row of dblock_locks, on a
// connection pinned for as long as the lock is held.
//
// # How a lock is taken
//
// Acquire begins a transaction on a pinned connection and locks the name's
// row. The first attempt uses NOWAIT, so the common, uncontended path costs
// what a hand-written BEGIN / SELECT ... FOR UPDATE / COMMIT costs. When the
// row is locked, TryAcquire fails at once with an error wrapping
// dblock.ErrNotAcquired (and a *dblock.HeldError), and Acquire waits in the
// database's own lock queue, so the hand-over is immediate and needs no
// polling. The wait is bounded by ctx, WithWait and Config.LockTimeout
// through a lock timeout on the server: PostgreSQL's lock_timeout (set for the
// waiting statement's transaction and reset after it), MariaDB's SET STATEMENT
// innodb_lock_wait_timeout (whole seconds; the client stops at the exact bound
// and the server's wait ends within the next second), MySQL 8's session
// innodb_lock_wait_timeout, set around the statement and restored.
//
// A name that has no row yet gets one from an autocommit INSERT ... ON
// CONFLICT DO NOTHING on the pool (never inside the locking transaction, so
// nobody waits on an uncommitted insert and no transaction is aborted by a
// duplicate key); the first token of a new row follows the same floor rule as
// lease rows.
//
// Goroutines of one process that want the same name queue inside the
// process: one connection per name waits in the database at a time, and a
// name passes from one goroutine to the next without a round trip.
//
// # Holding and releasing
//
// The critical section runs in the transaction: Do runs fn(ctx, tx) and
// commits when fn returns nil, rolls back when it returns an error or panics
// (and re-raises the panic). The handle form returns a *Lease whose Tx is the
// locking transaction; Release and Commit commit it, Rollback rolls it back.
// A transaction that cannot be ended cleanly has its connection destroyed,
// never returned to the pool while it may still hold a lock.
//
// A lock is reentrant per owner within one Locker: a second Acquire by the
// same owner (WithOwner, or dblock.ContextWithOwner) returns a handle on the
// same transaction, with Reentry counting the acquisitions; the transaction
// ends with the last handle (rolled back if any handle asked for a rollback).
// Reentry from another process is impossible: another process cannot join
// this transaction, so it waits like any other owner.
//
// # Fencing tokens
//
// The transaction already fences the database's own writes, and a write costs
// a log flush, so a lock gets a token only when asked (dblock.WithToken): the
// row's version is bumped in the locking transaction (PostgreSQL from
// dblock_token_seq, the others version + 1), strictly above every token issued
// earlier for the name in any mode. Without WithToken, Token is zero.
//
// # When the holder fails
//
// A crashed client frees its locks as soon as its connection closes. A frozen
// or partitioned client keeps its connection, so the server is told to end a
// transaction that stays idle longer than the TTL (Config.TTL, or WithTTL):
// PostgreSQL's idle_in_transaction_session_timeout, set per transaction, and
// MariaDB's idle_transaction_timeout, a session setting that stays on the
// pooled connection (so give this Locker its own pool if your other
// transactions may idle longer than the TTL). MySQL 8 and SQLite have no such
// bound: there, rely on TCP keepalives and wait_timeout. A lock held by a busy
// transaction (a statement running) is not ended by this bound.
//
// Whether the holding sessions still exist is asked of the server every
// Config.WatchInterval from another pooled connection (pg_stat_activity,
// information_schema.PROCESSLIST); the holding connection itself is never
// touched, because the caller may be running statements on it. When a session
// is gone (killed, ended by the idle bound, server restarted), every handle on
// it is lost: Done closes, Err wraps dblock.ErrLost and dblock.ErrConnLost,
// Do's context is cancelled, statements on Tx fail, and Release reports the
// loss. When the server cannot be asked, a lock is declared lost once its
// session has gone unconfirmed for half its TTL.
//
// # Deadlocks
//
// Locks taken one name at a time never deadlock in the database, but
// transactions that lock more rows (LockRows, your own statements) can; the
// database then picks a victim, whose error wraps dblock.ErrDeadlock. On
// MySQL the victim's whole transaction is rolled back, which releases its
// lock: LockRows then marks the lock lost. If your own statements on Tx get
// error 1213, treat the lock as lost.
//
// AcquireMany locks several names with one statement, in name order, so two
// callers asking for overlapping sets never deadlock on each other. LockRows
// locks rows of your own tables, many keys in key order, with NOWAIT or SKIP
// LOCKED (work-queue style), inside your transaction.
//
// # Other modes
//
// Modes share one namespace. A name held by an unexpired optimistic or fair
// lease is busy here too: TryAcquire fails with a *dblock.HeldError naming the
// lease's owner and expiry, and Acquire waits (polling with backoff, at the
// latest at the lease's expiry). A name held here is reported as not acquired
// at once by the lease modes, which never wait on row locks.
//
// # SQLite
//
// SQLite has no row locks. A lock is a write transaction on the whole
// database (BEGIN IMMEDIATE), so every other writer, whatever name it wants,
// waits for it, including other pessimistic locks of the same process: hold
// one pessimistic lock per SQLite database at a time, keep it short, and use
// the optimistic mode for anything held long. Waiting is SQLite's busy
// handler (polling), in slices of at most SQLiteWaitChunk when the wait is
// bounded; TryAcquire sets the connection's busy timeout to zero for the
// attempt and so returns at once. Locks are exclusive between the processes of
// one host that share the file; a killed process's lock is freed by the
// operating system.
//
// # Not exclusive across Galera writers
//
// FOR UPDATE is node-local in a MariaDB Galera cluster: two clients writing
// through different nodes can both hold a name. Use the lease modes there.
package pessimistic
