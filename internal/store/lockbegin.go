package store

import (
	"context"
	"errors"
)

// A MariaDB pessimistic hold on a pool Open opened begins its transaction
// with its lock statement, in one call: the pool's driver (dialect/mysql)
// defers the BEGIN of a transaction begun with a context from both
// WithCheckedCommit and WithDeferredBegin, and LockRow sends
// MariaDBLockBegin (MySQL migration 00026) in place of the NOWAIT lock
// statement when its caller says the BEGIN was deferred
// (RowLockParams.BeginDeferred). With the checked commit, a hold then
// takes two round trips where a hand-written one takes three. The
// pessimistic Locker defers the BEGIN only while a hold is its only one
// (see BeginsInCall). The driver runs the call only while the BEGIN is
// pending, and otherwise answers ErrBegun without
// sending anything; where the procedure is refused (missing, or not
// executable by the account) it sends START TRANSACTION at once. Either
// way LockRow then sends the plain statement.

// MariaDBLockBegin begins a transaction and locks a name's row in it
// without waiting, answering the NOWAIT lock statement's columns: (name,
// shared).
const MariaDBLockBegin = "CALL dblock_lock_begin(?, ?)"

// BeginsInCall reports whether a transaction begun on db with a context
// from WithDeferredBegin begins with its lock's call (MariaDBLockBegin):
// MariaDB's holds on a pool Open opened. The call saves the round trip of
// START TRANSACTION, and costs the server more work than the two
// statements it replaces, so the pessimistic Locker asks for it only
// while a hold is its only one (pessimistic's Locker.defersBegin).
func (db *DB) BeginsInCall() bool {
	return db.DefersBegin() && db.Dialect.Kind() == MySQL
}

// ErrBegun is the driver's answer to MariaDBLockBegin in a transaction that
// has begun on the server already (its BEGIN was not deferred, or was sent):
// nothing was sent, and the plain lock statement is to be sent instead.
var ErrBegun = errors.New("dblock: the transaction has begun; lock with the plain statement")

// lockBegin sends MariaDBLockBegin in tx (done reports whether the driver
// ran it; its error is the lock's). Not done: the transaction had begun,
// or the procedure was refused and the driver has begun the transaction
// meanwhile; the caller sends the plain statement.
func lockBegin(ctx context.Context, tx Querier, name string, shared bool, dest []any) (done bool, err error) {
	err = tx.QueryRowxContext(ctx, MariaDBLockBegin, name, shared).Scan(dest...)
	if errors.Is(err, ErrBegun) || ProcedureRefused(err) {
		return false, nil
	}
	return true, err
}
