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
// A wait given up (its context ended, or the Locker closed) returns only once
// its server session can no longer be granted the row: the drivers give up a
// statement by closing its connection, which the server may notice only
// later, so the session is ended from the Locker's own connection and seen
// gone first (on MySQL and MariaDB for every wait; on PostgreSQL for any lock
// statement cut off in flight, a NOWAIT included). A release right after the
// call therefore leaves the name free for the next acquirer.
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
// # Shared holds
//
// AcquireShared (TryAcquireShared, DoShared) locks the row in share mode
// instead: FOR KEY SHARE on PostgreSQL, FOR SHARE on MySQL 8, LOCK IN SHARE
// MODE on MariaDB. Shared holds of a name are granted together; every
// exclusive acquirer (this mode's, the lease modes', rwlock's writers)
// waits or is refused until the last one ends, and a name held exclusively
// makes a shared acquisition wait. On PostgreSQL they share with the
// readers of package rwlock too, whose statements lock the row FOR NO KEY
// UPDATE (which conflicts with FOR UPDATE but not with FOR KEY SHARE); on
// MySQL and MariaDB, which have no such pair of row locks, a reader waits
// for the shared holds to end whenever it writes the row (to begin a
// readers' period, and to release; MariaDB's readers joining a period with
// half its TTL left do not), though a shared hold is granted beside readers
// already holding. On SQLite, which has one writer, a shared hold is an
// exclusive one. A shared hold takes no token (WithToken is refused) and no
// more names (Lock); its owner re-enters it with AcquireShared, and is
// refused the exclusive lock (ErrUpgrade) rather than waiting for itself.
// Goroutines of one process do not queue in the process for a shared hold.
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
// Release, Commit and Rollback are bounded by their ctx: when it ends first,
// the connection is closed (on MySQL the session is killed from the Locker's
// own connection) and the error says the outcome is unknown.
//
// A lock is reentrant per owner within one Locker: a second Acquire by the
// same owner (WithOwner, or dblock.ContextWithOwner) returns a handle on the
// same transaction, with Reentry counting the acquisitions, and takes a
// savepoint. Such a handle's Rollback (or a failed nested Do) rolls back its
// own work only, to that savepoint, and the transaction goes on; its Commit
// releases the savepoint. The transaction ends with the last handle. The
// first handle's Rollback rolls the whole transaction back; a Commit whose
// work is rolled back that way (or by an earlier re-entrant handle's
// rollback) returns ErrRolledBack, never nil. Reentry from another process
// is impossible: another process cannot join this transaction, so it waits
// like any other owner.
//
// # Fencing tokens
//
// The transaction already fences the database's own writes, and a write costs
// a log flush, so a lock gets a token only when asked (dblock.WithToken);
// without it, Token is zero and the lock writes nothing that a hand-written
// SELECT ... FOR UPDATE does not. A token is strictly above every token issued
// earlier for the name in any mode, and it is committed before it is handed
// out, so a holder that dies before its commit never sees it issued again,
// even across a crash or failover: PostgreSQL takes it from dblock_token_seq
// in an autocommit statement that also writes a transactional logical
// message (pg_logical_emit_message, prefix "dblock"), since nextval alone
// would let the commit skip the WAL flush; MySQL raises dblock_fence.floor in
// an autocommit statement. Both run on the Locker's own connection, then the
// token is written into the row in the locking transaction. Since a token is
// issued only once the row is locked there, a holder that died with a later
// token (its transaction rolled back) is always followed by a greater one.
//
// SQLite cannot commit anything while the lock holds the database, so the
// token is issued first, committed on the attempt's connection, and checked
// under the lock: the row's version must be below it, and no token may have
// been issued after it while the attempt waited for the lock (the fencing
// floor, dblock_fence.floor, read by the same statement that writes the
// token). A token issued later may have been handed to a process that then
// died holding the lock: its transaction rolled back, the row's version with
// it, yet its token was out; an earlier token would come after it. In either
// case the attempt lets the lock go and starts again with a new token, so
// every token handed out on SQLite is committed first and above every token
// issued before it; a token is never taken inside the write transaction,
// where a holder's death would roll it back and let it be issued again (or
// let a smaller one follow it). When waiters keep overtaking one another
// this costs an extra token and write lock per overtaken attempt. There a
// token can only be asked for by the first acquisition of a hold (a
// re-entrant acquisition, or Lock on a hold with tokens, is refused), and
// AcquireMany issues every name's token before it locks, checked against the
// highest of them.
//
// # When the holder fails
//
// A crashed client frees its locks as soon as its connection closes. A frozen
// or partitioned client keeps its connection, so the server is told to end a
// transaction that stays idle longer than the TTL (Config.TTL, or WithTTL):
// PostgreSQL's idle_in_transaction_session_timeout, local to the transaction;
// MariaDB's idle_transaction_timeout and, on MySQL 8, which has no such
// setting, wait_timeout (the bound on an idle session), both set on the
// session when the lock is taken. On MariaDB, on a pool dialect.Open opened,
// the setting stays on the session afterwards (it ends only transactions
// left idle longer than the TTL), so a lock with the same TTL on that
// session sets nothing; on a pool passed to dialect.New, and always for
// MySQL 8's wait_timeout (which also ends sessions idle in the pool), it is
// restored when the lock ends, sharing a round trip with the check below.
// SQLite has no such bound. The bound is the TTL rounded up, never down, to
// what the setting can say: the millisecond on PostgreSQL; on MySQL and
// MariaDB the whole second, and at least 2 s, so that a holder that keeps
// its transaction busy every quarter of the bound (as dblock exec does while
// its command runs) may be 1.5 s late before the server ends a live hold.
// A lock held by a busy transaction (a statement
// running) is not ended by this bound.
//
// Whether the holding sessions still exist is asked of the server every
// Config.WatchInterval on the Locker's own connection (pg_stat_activity,
// information_schema.PROCESSLIST); the holding connection itself is never
// touched, because the caller may be running statements on it. When a session
// is gone (killed, ended by the idle bound, server restarted), every handle on
// it is lost: Done closes, Err wraps dblock.ErrLost and dblock.ErrConnLost,
// Do's context is cancelled, statements on Tx fail, and Release reports the
// loss. When the server cannot be asked, a lock is declared lost once its
// session has gone unconfirmed for half its TTL, and its transaction is ended
// on the client (statements on Tx then fail with sql.ErrTxDone; the
// connection is destroyed), since the server may already have ended it.
//
// A session is known by more than its id, which the server hands out again:
// a restarted MariaDB or MySQL counts connection ids from 1, and
// PostgreSQL's backend pids are process ids that the system reuses. The lock
// statement also returns the database clock and, on MySQL, @@server_id, and
// on PostgreSQL its transaction's start (now()). The watcher learns, once
// per connection of its own, which run of the server that connection talks
// to (PostgreSQL pg_postmaster_start_time(); MySQL @@server_id and the start
// derived from the Uptime status), and a lock taken before that run began,
// or on another server, is lost whatever session now has its id. On
// PostgreSQL the session found under the pid must also still be in the
// locking transaction (pg_stat_activity.xact_start). Locks taken after the
// watcher's connection was opened are known to be on its server's current
// run; on MySQL, whose Uptime counts whole seconds, a lock taken in the
// second in which the server started, by a Locker whose own connection was
// opened after it (after a restart), is taken for an earlier run's and
// reported lost.
//
// # Connections
//
// On PostgreSQL and MySQL a Locker that holds or takes locks keeps one
// connection of the pool for itself, taken before the first holder's: the
// watcher asks on it, tokens are committed on it, missing rows are created and
// abandoned waits cancelled from it. Holders that take every other connection
// therefore neither stall the watcher (a stalled watcher would have to declare
// live locks lost) nor deadlock a token. Size the pool for the holders plus
// one per Locker. TryAcquire and TryLock do not wait for the pool: when it has
// no free connection they fail at once with dblock.ErrNotAcquired and
// ErrPoolExhausted (a connection being returned or dialled at that moment is
// waited for at most TryConnWait); Acquire waits for a connection within its
// wait bound. With SetMaxOpenConns(1) there is no room for the Locker's own
// connection: locks work, the watcher is off, and WithToken is refused.
//
// # When the server ends the transaction
//
// On MySQL and MariaDB a deadlock victim's whole transaction is rolled back
// by the server, and some statements (DDL) commit it implicitly, while the
// client's *sql.Tx still looks open: statements run on it afterwards run in
// autocommit mode, each committed on its own. When dblock sees such a loss
// (a deadlock in Lock or LockRows), it ends the Tx in database/sql at once, so
// later statements fail with sql.ErrTxDone. On a pool it did not open it
// cannot see your own statements' errors, so before COMMIT it asks the
// server whether the transaction is still open (@@in_transaction on
// MariaDB; on MySQL 8 whether SET TRANSACTION is refused): if not, it sends
// no COMMIT and Release reports the lock lost (dblock.ErrLost with
// ErrTxEnded). On a MariaDB pool dialect.Open opened the COMMIT asks in the
// same statement, unless the connection saw every statement of the
// transaction succeed and each was a plain data statement (SELECT, INSERT,
// UPDATE, DELETE, REPLACE, WITH, DO) or dblock's own: then the transaction
// is known to be open and a plain COMMIT is sent. PostgreSQL keeps a failed
// transaction open and aborted until it ends: its statements fail, and
// Commit returns ErrRolledBack.
//
// # Deadlocks
//
// Each Acquire runs a transaction of its own. So when the holder of one name
// calls Acquire for a second name while the holder of that name calls
// Acquire for the first, each waits in a different transaction and the
// database sees no cycle: both wait until their bounds (ctx, WithWait,
// Config.LockTimeout) and fail with dblock.ErrNotAcquired. To take more names
// while holding a lock, call Lock (or TryLock) on its handle: the names are
// locked in the held transaction, so such a cycle is a deadlock the database
// detects, and one of the calls returns an error wrapping dblock.ErrDeadlock
// (on PostgreSQL the victim keeps what it held before the call; on MySQL its
// whole transaction is rolled back and the lock is lost). Transactions that
// lock rows of your own (LockRows, your own statements) can deadlock the same
// way, with the same error.
//
// AcquireMany locks several names with one statement, in name order, so two
// callers asking for overlapping sets never deadlock on each other. LockRows
// locks rows of your own tables, many keys in key order, with NOWAIT or SKIP
// LOCKED (work-queue style), inside your transaction; on MySQL the key column
// must be indexed (otherwise InnoDB locks every row it scans).
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
// attempt (the token, when asked for, is issued on that connection too) and so
// returns at once. Locks are exclusive between the processes of one host that
// share the file; a killed process's lock is freed by the operating system.
// LockRows takes the database's write lock in the caller's transaction (so it
// also holds in a transaction begun DEFERRED); NoWait and SkipLocked, which
// need row locks, are refused.
//
// # Not exclusive across Galera writers
//
// FOR UPDATE is node-local in a MariaDB Galera cluster: two clients writing
// through different nodes can both hold a name. Use the lease modes there.
package pessimistic
