package store

import (
	"context"
	"fmt"
	"math"
	"time"
)

// MySQL's and MariaDB's row-lock engine: MariaDB bounds one statement's
// lock wait (SET STATEMENT), MySQL 8 sets the session's
// innodb_lock_wait_timeout around the statement; the insert of a missing row
// retries while the fencing floor is being raised.

// ensureRow: MariaDB's insert does not wait for a holder's row lock (its
// Ensure says so); MySQL 8 cannot say so, and reads first (see below).
func (d mysqlDialect) ensureRow(ctx context.Context, db *DB, q Querier, name string) error {
	if !d.mariadb {
		// MySQL 8 cannot tell the upsert not to wait: its duplicate-key
		// check waits for a holder's row lock (at least 1 s, the smallest
		// innodb_lock_wait_timeout). A consistent read first, which waits
		// for nothing, skips the insert when the row already exists (a
		// racing first acquisition created it), so TryAcquire does not wait
		// there; only a row created between the two statements can still
		// make the insert wait.
		exists, err := db.rowExists(ctx, q, name)
		if err != nil {
			return db.Classify(err)
		}
		if exists {
			return nil
		}
	}
	// Retries while a reaper raises the fencing floor (see mysqlAcquire).
	err := db.execFenced(ctx, q, d.Row().Ensure, name)
	return db.ensuredRow(ctx, q, name, err)
}

func (d mysqlDialect) lockRow(ctx context.Context, db *DB, tx Querier, name string, p RowLockParams, dest []any) error {
	query := d.Row().lockText(p)
	switch {
	case p.NoWait && p.BeginDeferred && d.mariadb && db.DefersBegin():
		if done, err := lockBegin(ctx, tx, name, p.Shared, dest); done {
			return err
		}
		return db.txQueryRow(ctx, tx, query, []any{name}, dest...)
	case p.NoWait:
		return db.txQueryRow(ctx, tx, query, []any{name}, dest...)
	case d.mariadb:
		return tx.QueryRowxContext(ctx, mariadbLockWait(waitFor(ctx, p.Wait))+query, name).Scan(dest...)
	default:
		return db.mysqlSessionWait(ctx, tx, waitFor(ctx, p.Wait), func() error {
			return tx.QueryRowxContext(ctx, query, name).Scan(dest...)
		})
	}
}

func (d mysqlDialect) lockRows(ctx context.Context, db *DB, tx Querier, names []string, p RowLockParams, run func(string, []any) error) error {
	query, args := lockManyQuery(d, p.NoWait, nil, names, d.lockManySuffix(p.NoWait))
	switch {
	case p.NoWait:
		return run(query, args)
	case d.mariadb:
		return run(mariadbLockWait(waitFor(ctx, p.Wait))+query, args)
	default:
		return db.mysqlSessionWait(ctx, tx, waitFor(ctx, p.Wait), func() error { return run(query, args) })
	}
}

// sessionRef: the extra column is @@server_id.
func (mysqlDialect) sessionRef(id, extra, nowUs, bound int64) SessionRef {
	return SessionRef{ID: id, Server: extra, At: Micros(nowUs), Bound: bound}
}

// mariadbLockWait is the prefix that bounds one statement's lock wait on
// MariaDB.
func mariadbLockWait(wait time.Duration) string {
	return fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout=%d FOR ", mysqlSeconds(wait))
}

// mysqlSessionWait runs fn with the session's innodb_lock_wait_timeout set to
// wait, and restores the previous value (MySQL 8 cannot bound one statement).
func (db *DB) mysqlSessionWait(ctx context.Context, tx Querier, wait time.Duration, fn func() error) error {
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(
		"SET @dblock_saved_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", mysqlSeconds(wait))); err != nil {
		return err
	}
	err := fn()
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), "SET SESSION innodb_lock_wait_timeout = @dblock_saved_lwt"); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// mysqlSeconds renders a lock-wait bound in whole seconds (rounded up, at
// least 1; zero means unbounded, which is the server's maximum).
func mysqlSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 100000000
	}
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}
