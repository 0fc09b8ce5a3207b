package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// probeEngine is the binding of probing the server on one database (see engine).
type probeEngine interface{}

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

// sqliteProbeBusyTimeout is how long the SQLite probe waits for the write
// lock before calling it held: the bound a lease acquire waits too
// (sqliteLeaseBusyTimeout), so that ordinary writers, which hold the lock for
// one commit, are not taken for a transaction hold.
const sqliteProbeBusyTimeout = sqliteLeaseBusyTimeout

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
	if db.Dialect.Kind() == SQLite {
		locked, err := db.sqliteWriteLocked(ctx)
		return TxHolds{WriteLocked: locked}, err
	}
	if limit <= 0 {
		limit = TxProbeLimitDefault
	}
	var out TxHolds
	cands, err := db.txCandidates(ctx, names, limit+1)
	if err != nil {
		return TxHolds{}, err
	}
	if len(names) == 0 && len(cands) > limit {
		cands, out.Limited = cands[:limit], true
	}
	for round := 0; round < 2 && len(cands) > 0; round++ {
		if round > 0 {
			// Those still naming no live lease.
			if cands, err = db.txCandidates(ctx, cands, 0); err != nil {
				return TxHolds{}, err
			}
			if len(cands) == 0 {
				break
			}
		}
		if cands, err = db.skipped(ctx, cands); err != nil {
			return TxHolds{}, err
		}
	}
	sort.Strings(cands)
	out.Names = cands
	return out, nil
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

// txCandidates returns the names (all, or those of names) whose row names no
// live lease holder, in name order, at most limit of them (0: no limit). On
// PostgreSQL only rows with xmax set are returned: a row lock sets it.
func (db *DB) txCandidates(ctx context.Context, names []string, limit int) ([]string, error) {
	var where string
	switch db.Dialect.Kind() {
	case Postgres:
		where = `(owner IS NULL OR expires_at IS NULL OR expires_at <= now()) AND xmax::text <> '0'`
	default:
		where = `(owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))`
	}
	query := `SELECT name FROM dblock_locks WHERE ` + where + db.nameFilter("name", names, 1, " AND ") + ` ORDER BY name`
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	return db.names(ctx, db.DB, query, nameArgs(names))
}

// skipped returns those of names (rows that exist) that a shared locking
// read with SKIP LOCKED skips: rows another transaction holds locked.
func (db *DB) skipped(ctx context.Context, names []string) ([]string, error) {
	var clause string
	switch {
	case db.Dialect.Kind() == Postgres:
		clause = " FOR KEY SHARE SKIP LOCKED"
	case mariaDB(db):
		clause = " LOCK IN SHARE MODE SKIP LOCKED"
	default:
		clause = " FOR SHARE SKIP LOCKED"
	}
	table := "dblock_locks"
	if db.Dialect.Kind() == MySQL {
		// The primary key, where a pessimistic holder's lock is: through a
		// covering secondary index the shared lock would be taken on that
		// index's records, which conflict with nothing the holder locked.
		table += " FORCE INDEX (PRIMARY)"
	}
	query := `SELECT name FROM ` + table + ` WHERE` + db.nameFilter("name", names, 1, " ") + clause
	var (
		free []string
		err  error
	)
	if db.Dialect.Kind() == Postgres {
		free, err = db.names(ctx, db.DB, query, nameArgs(names))
	} else {
		// InnoDB takes no lock for a locking read in autocommit mode, so it
		// would skip nothing: the read runs in a transaction of its own,
		// READ COMMITTED so that it locks no gap, rolled back at once.
		var tx *sqlx.Tx
		tx, err = db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return nil, db.Classify(err)
		}
		free, err = db.names(ctx, tx, query, nameArgs(names))
		_ = tx.Rollback()
	}
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(free))
	for _, n := range free {
		seen[n] = true
	}
	var out []string
	for _, n := range names {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

func (db *DB) names(ctx context.Context, q Querier, query string, args []any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name []byte
		if err := rows.Scan(&name); err != nil {
			return nil, db.Classify(err)
		}
		out = append(out, string(name))
	}
	return out, db.Classify(rows.Err())
}

// sqliteWriteLocked reports whether another connection holds the database's
// write lock for longer than sqliteProbeBusyTimeout.
func (db *DB) sqliteWriteLocked(ctx context.Context) (locked bool, err error) {
	c, err := db.Connx(ctx)
	if err != nil {
		return false, db.Classify(err)
	}
	defer c.Close()
	prev, err := db.SQLiteBusyTimeout(ctx, c, sqliteProbeBusyTimeout)
	if err != nil {
		return false, err
	}
	restore := func(c *sqlx.Conn, stmts ...string) {
		for _, s := range stmts {
			if _, err := c.ExecContext(context.WithoutCancel(ctx), s); err != nil {
				// A connection left in a transaction or with the short
				// timeout must not go back to the pool.
				_ = c.Raw(func(any) error { return driver.ErrBadConn })
				return
			}
		}
	}
	_, err = c.ExecContext(ctx, "BEGIN IMMEDIATE")
	err = db.Classify(err)
	switch {
	case err == nil:
		restore(c, "ROLLBACK", fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
		return false, nil
	case errors.Is(err, dblock.ErrNotAcquired):
		restore(c, fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
		return true, nil
	}
	restore(c, fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
	return false, err
}

// ClockNow reads the database clock.
func (db *DB) ClockNow(ctx context.Context) (time.Time, error) {
	var query string
	switch db.Dialect.Kind() {
	case Postgres:
		query = `SELECT ` + pgUs("clock_timestamp()")
	case MySQL:
		query = `SELECT ` + myUs("UTC_TIMESTAMP(6)")
	default:
		query = `SELECT ` + sqliteNow
	}
	var us int64
	if err := db.QueryRowxContext(ctx, query).Scan(&us); err != nil {
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
