package store

import (
	"context"
	"database/sql"
)

// A MariaDB pessimistic hold on a pool Open opened begins its transaction
// with its lock statement, in one call: the pool's driver (dialect/mysql)
// defers the BEGIN of a transaction begun with a context from both
// WithCheckedCommit and WithDeferredBegin, and LockRow, finding it pending
// on the hold's connection, calls MariaDBLockBegin there (MySQL migration
// 00026) in place of the NOWAIT lock statement. With the checked commit, a
// hold then takes two round trips where a hand-written one takes three.
// Where the procedure is refused (missing, or not executable by the
// account), the driver sends START TRANSACTION at once and LockRow sends
// the plain statement.

// MariaDBLockBegin begins a transaction and locks a name's row in it
// without waiting, answering the NOWAIT lock statement's columns: (name,
// shared).
const MariaDBLockBegin = "CALL dblock_lock_begin(?, ?)"

// BeginPender is a driver connection that may hold back the BEGIN of the
// transaction open on it (dialect/mysql's, see above).
type BeginPender interface {
	// BeginPending reports whether that BEGIN is still to be sent.
	BeginPending() bool
}

// beginPending reports whether the transaction open on conn has not begun
// on the server yet.
func beginPending(conn *sql.Conn) bool {
	pending := false
	_ = conn.Raw(func(dc any) error {
		if b, ok := dc.(BeginPender); ok {
			pending = b.BeginPending()
		}
		return nil
	})
	return pending
}

// lockBegin runs MariaDBLockBegin in tx, open on conn, when its BEGIN is
// pending (done reports whether it ran; its error is the lock's). A refused
// procedure is not done: the driver has begun the transaction meanwhile,
// and the caller sends the plain statement. The call goes through tx, not
// conn: database/sql closes a Conn whose statement fails with
// driver.ErrBadConn, and would wait there for the transaction it holds.
func lockBegin(ctx context.Context, tx Querier, conn *sql.Conn, name string, shared bool, dest []any) (done bool, err error) {
	if conn == nil || !beginPending(conn) {
		return false, nil
	}
	err = tx.QueryRowxContext(ctx, MariaDBLockBegin, name, shared).Scan(dest...)
	if ProcedureRefused(err) {
		return false, nil
	}
	return true, err
}
