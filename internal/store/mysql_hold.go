package store

import (
	"context"
	"fmt"
	"time"
)

// MySQL's and MariaDB's hold engine: the hold bound is a session setting in
// whole seconds (MariaDB's idle_transaction_timeout, MySQL 8's
// wait_timeout), set once the lock is held and restored before the
// transaction ends, in the round trip that checks the server has not ended
// the transaction already.

// mysqlHoldBoundMin is the smallest hold bound set on MySQL and MariaDB,
// whose settings take whole seconds: with a bound of one second, a holder
// that keeps its transaction busy every quarter of it (dblock exec) would
// lose the hold to one statement 750 ms late; with two, 1.5 s late.
const mysqlHoldBoundMin = 2 * time.Second

// holdBound: the whole second, at least mysqlHoldBoundMin.
func (mysqlDialect) holdBound(ttl time.Duration) time.Duration {
	return max(ceilTo(ttl, time.Second), mysqlHoldBoundMin)
}

// setHoldBound sets the session's bound (see SetHoldBound): on MariaDB
// without saving it when it stays on the session (stickyHoldBound), and not
// at all when the session has it already.
func (d mysqlDialect) setHoldBound(ctx context.Context, db *DB, tx Querier, ttl time.Duration, current int64) error {
	secs := int64(max(db.HoldBound(ttl), mysqlHoldBoundMin) / time.Second)
	var stmt string
	switch {
	case d.stickyHoldBound(db) && current == secs:
		return nil
	case d.stickyHoldBound(db):
		stmt = fmt.Sprintf("%s%d", MariaDBHoldBoundSet, secs)
	case d.mariadb:
		stmt = fmt.Sprintf("SET @dblock_saved_itt = @@SESSION.idle_transaction_timeout, SESSION idle_transaction_timeout = %d", secs)
	default:
		stmt = fmt.Sprintf("SET @dblock_saved_wt = @@SESSION.wait_timeout, SESSION wait_timeout = %d", secs)
	}
	_, err := tx.ExecContext(ctx, stmt)
	return db.Classify(err)
}

// MariaDBHoldBoundSet, followed by whole seconds, is the statement that sets
// a hold's bound on a MariaDB session where it stays (stickyHoldBound). It
// does not end the transaction it runs in (dialect/mysql's proof of an open
// transaction counts on that).
const MariaDBHoldBoundSet = "SET SESSION idle_transaction_timeout = "

// stickyHoldBound reports whether the hold bound stays on the session after
// a hold (see SetHoldBound): MariaDB, on a pool Open opened.
func (d mysqlDialect) stickyHoldBound(db *DB) bool { return db.owned && d.mariadb }

// checksCommit: MariaDB runs anonymous blocks (BEGIN NOT ATOMIC), MySQL 8
// does not.
func (d mysqlDialect) checksCommit() bool { return d.mariadb }

// endHold restores the bound SetHoldBound saved and, before a COMMIT,
// checks that the transaction is still open (see EndHold).
func (d mysqlDialect) endHold(ctx context.Context, db *DB, tx Querier, commit bool) (bool, error) {
	if d.stickyHoldBound(db) {
		if !commit {
			return true, nil // Nothing to restore, and a rollback needs no check.
		}
		return db.mariadbEndHold(ctx, tx, mariadbTxOpen)
	}
	if d.mariadb {
		return db.mariadbEndHold(ctx, tx, mariadbEndHoldRestore)
	}
	// MySQL 8 has no @@in_transaction; SET TRANSACTION (the next
	// transaction's characteristics) is refused with error 1568 exactly
	// when a transaction is in progress, and needs no privilege.
	if _, err := tx.ExecContext(ctx, "SET SESSION wait_timeout = @dblock_saved_wt"); err != nil {
		return false, db.Classify(err)
	}
	_, err := tx.ExecContext(ctx, "SET TRANSACTION READ WRITE")
	switch {
	case mysqlError(err, 1568):
		return true, nil
	case err == nil:
		return false, nil
	}
	return false, db.Classify(err)
}

// mariadbEndHoldRestore restores the idle bound saved by SetHoldBound and,
// in the same round trip, checks that the transaction is still open: when it
// is not (the server rolled it back as a deadlock victim, or a statement
// committed it implicitly), IF evaluates the subquery, which fails with
// error 1242. The restore is then not applied either; the caller destroys
// the connection. mariadbTxOpen is the check alone, as a SET (an OK packet,
// no result set to read).
const (
	mariadbEndHoldRestore = `SET SESSION idle_transaction_timeout = IF(@@in_transaction = 1, @dblock_saved_itt,
    (SELECT 1 UNION SELECT 2))`
	mariadbTxOpen = `SET @dblock_tx_open = IF(@@in_transaction = 1, 1, (SELECT 1 UNION SELECT 2))`
)

// mariadbEndHold runs stmt (mariadbEndHoldRestore or mariadbTxOpen) and
// reports whether the transaction was open.
func (db *DB) mariadbEndHold(ctx context.Context, tx Querier, stmt string) (bool, error) {
	_, err := tx.ExecContext(ctx, stmt)
	if mysqlError(err, 1242) {
		return false, nil
	}
	return err == nil, db.Classify(err)
}
