package store

import (
	"context"
	"io"
	"sort"
	"time"
)

// probeEngine is the binding of probing the server on one database (see engine).
type probeEngine interface {
	// probeTxHolds is ProbeTxHolds once the names were checked.
	probeTxHolds(ctx context.Context, db *DB, names []string, limit int) (TxHolds, error)
	// clockNowSQL is ClockNow's statement, answering the database clock in
	// µs since the epoch.
	clockNowSQL() string
}

// Administrative probes for `dblock status`, `dblock release` and the exit-75
// line of `dblock exec`: who holds a name when no lease row says so.
//
// A pessimistic lock is a transaction holding a row lock (PostgreSQL,
// MySQL/MariaDB) or the database's write lock (SQLite), and writes no owner:
// only a locking read can see it. The probes never wait for a lock: they use
// SKIP LOCKED (or, on SQLite, a short busy timeout), and their own locks last
// one statement.

// TxProbeLimitDefault bounds how many rows ProbeTxHolds probes when it is
// given no names.
const TxProbeLimitDefault = 1000

// TxHolds is what ProbeTxHolds found.
type TxHolds struct {
	// Names are the probed names whose row a transaction holds locked and
	// that no live lease names (PostgreSQL, MySQL/MariaDB), in name order.
	Names []string
	// WriteLocked reports (SQLite only) that a transaction holds the
	// database's write lock. A pessimistic hold on SQLite locks the whole
	// file, so it does not say which name: none can be taken until it ends.
	WriteLocked bool
	// Limited reports that, probing without names, more rows were
	// candidates than the limit: only the first ones, by name, were probed.
	Limited bool
}

// Held reports whether name was found held by a transaction: its row is
// locked, or (SQLite) the database is write-locked.
func (h TxHolds) Held(name string) bool {
	if h.WriteLocked {
		return true
	}
	i := sort.SearchStrings(h.Names, name)
	return i < len(h.Names) && h.Names[i] == name
}

// ProbeTxHolds finds transaction (pessimistic) holds without waiting for any
// lock. With names (a bad one is refused: dblock.ErrInvalidName), it probes
// those names' rows; without, up to limit rows
// (TxProbeLimitDefault when limit <= 0) that no live lease names. Only rows
// that name no live lease holder are probed: a live lease is the hold
// whatever else locks its row (pessimistic acquirers wait for it).
//
// PostgreSQL: rows whose xmax is set (a row lock leaves it there) are probed
// with FOR KEY SHARE SKIP LOCKED, which only a FOR UPDATE lock (a
// pessimistic holder, a delete, an upsert under way) skips; lease updates do
// not conflict with it. MySQL/MariaDB: LOCK IN SHARE MODE SKIP LOCKED
// (MySQL 8: FOR SHARE SKIP LOCKED), by primary key in a READ COMMITTED
// transaction of its own (InnoDB locks nothing in autocommit mode), so no gap
// is locked. A row is reported when it was skipped twice, the second time
// after reading again that it still names no live lease: a lease statement
// under way locks a row for an instant, a transaction hold for as long as it
// runs. The probe's own shared locks last one statement; a pessimistic
// TryAcquire of a probed name at that very instant may fail.
//
// The server may refuse the locking read: PostgreSQL wants UPDATE on
// dblock_locks for any locking read (MySQL 8: UPDATE, DELETE or LOCK TABLES;
// MariaDB only SELECT), and a read-only transaction (a PostgreSQL standby)
// takes no row locks. The error then says so (PermissionDenied,
// ReadOnlyRefused), and nothing is known about transaction holds: a caller
// must not report the names free.
//
// SQLite: BEGIN IMMEDIATE on a connection whose busy timeout is the short
// bound lease acquires use; the transaction is rolled back at once. A write
// lock held longer (WriteLocked) does not say which name its transaction
// holds, if any.
func (db *DB) ProbeTxHolds(ctx context.Context, names []string, limit int) (TxHolds, error) {
	if err := validateNames(names); err != nil {
		return TxHolds{}, err
	}
	return db.Dialect.probeTxHolds(ctx, db, names, limit)
}

// ReadOnlyRefused reports whether err is the server refusing a locking read
// because the transaction is read-only: PostgreSQL 25006 (a hot standby, or
// a role or session with default_transaction_read_only on), MySQL 1792.
// ProbeTxHolds fails so there; MariaDB takes the probe's shared locks in a
// read-only transaction.
func ReadOnlyRefused(err error) bool {
	if state, ok := pgState(err); ok {
		return state == "25006"
	}
	return mysqlError(err, 1792)
}

// ClockNow reads the database clock.
func (db *DB) ClockNow(ctx context.Context) (time.Time, error) {
	var us int64
	if err := db.QueryRowxContext(ctx, db.Dialect.clockNowSQL()).Scan(&us); err != nil {
		return time.Time{}, db.Classify(err)
	}
	return Micros(us), nil
}

// SetDriverLog sends the drivers' own log lines (the MySQL driver's
// "closing bad idle connection", which it prints to standard error by
// default) to w; io.Discard silences them. It affects every connection of
// the process.
func SetDriverLog(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	for _, d := range drivers {
		if d.SetLog != nil {
			d.SetLog(w)
		}
	}
}
