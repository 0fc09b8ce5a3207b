package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/sqlident"
)

// holdEngine is the binding of bounding a pessimistic hold and ending it on one database (see engine).
type holdEngine interface {
	// holdBound is HoldBound for d > 0.
	holdBound(d time.Duration) time.Duration
	// setHoldBound is SetHoldBound.
	setHoldBound(ctx context.Context, db *DB, tx Querier, d time.Duration, current int64) error
	// endHold is EndHold.
	endHold(ctx context.Context, db *DB, tx Querier, commit bool) (open bool, err error)
	// checksCommit reports whether the database can run a checked commit
	// (MariaDBCheckedCommit: MariaDB's anonymous blocks).
	checksCommit() bool
}

// HoldBound returns how long the server lets a pessimistic hold of TTL d
// stay idle before it ends the transaction (SetHoldBound, and the idle
// bound of the PostgreSQL lock statements): d rounded up, never down, to
// what the setting can say. PostgreSQL: the millisecond. MySQL and MariaDB:
// the whole second, and at least mysqlHoldBoundMin. Zero on SQLite, which
// has no such bound, and for d <= 0.
func (db *DB) HoldBound(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return db.Dialect.holdBound(d)
}

// ceilTo rounds d > 0 up to a multiple of unit.
func ceilTo(d, unit time.Duration) time.Duration {
	return (d + unit - 1) / unit * unit
}

// SetHoldBound asks the server to end the holding session if it stays idle
// longer than HoldBound(d) while it holds a pessimistic lock, so that a
// frozen or partitioned holder cannot keep the lock forever. It runs in the
// locking transaction once the lock is held; current is the session's
// setting the lock statement read (SessionRef.Bound).
//   - MariaDB: idle_transaction_timeout (whole seconds, at least 2). On a
//     pool Open opened, the setting stays on the session after the hold
//     (it only ends transactions left idle), so the next hold with the same
//     bound on that session sends nothing; on a pool the caller passed to
//     New, the session's value is saved here and restored by EndHold.
//   - MySQL 8, which has no idle-transaction bound: wait_timeout, the bound
//     on an idle session (whole seconds, at least 2), which ends the session
//     and so the transaction; always saved and restored, since it also ends
//     sessions idle in the pool.
//   - PostgreSQL sets idle_in_transaction_session_timeout inside the lock
//     statement (local to the transaction), and SQLite has no sessions: nil.
func (db *DB) SetHoldBound(ctx context.Context, tx Querier, d time.Duration, current int64) error {
	return db.Dialect.setHoldBound(ctx, db, tx, d, current)
}

// EndHold runs on the locking transaction tx just before its COMMIT
// (commit) or ROLLBACK. On MySQL and MariaDB it restores what SetHoldBound
// saved and, before a COMMIT, reports whether tx is still open on the
// server: a deadlock victim's transaction is rolled back by the server while
// the client's *sql.Tx believes it open, and statements run after that run
// in autocommit mode. A COMMIT then would commit nothing and report success.
// Elsewhere it reports true: PostgreSQL keeps a failed transaction open (and
// aborted) until its end, and its COMMIT then reports the rollback (see
// CommitRolledBack). Where the COMMIT itself checks (ChecksCommit), the
// caller skips EndHold before a COMMIT.
func (db *DB) EndHold(ctx context.Context, tx Querier, commit bool) (open bool, err error) {
	return db.Dialect.endHold(ctx, db, tx, commit)
}

// CommitRolledBack reports whether a COMMIT's error says the server rolled
// the transaction back instead (PostgreSQL answers COMMIT of a failed
// transaction so).
func CommitRolledBack(err error) bool {
	return driverSays(err, func(d *Driver) func(error) bool { return d.CommitRolledBack })
}

// Savepoint, RollbackToSavepoint and ReleaseSavepoint run the statements of
// the same names in tx (the same on every dialect). name is one of the
// caller's own identifiers, validated here. On MySQL a savepoint missing
// because the server rolled the whole transaction back fails with an error
// for which SavepointGone reports true.
func (db *DB) Savepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "SAVEPOINT ", name)
}

// RollbackToSavepoint undoes what tx did since the savepoint name (see Savepoint).
func (db *DB) RollbackToSavepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "ROLLBACK TO SAVEPOINT ", name)
}

// ReleaseSavepoint forgets the savepoint name, keeping what tx did (see Savepoint).
func (db *DB) ReleaseSavepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "RELEASE SAVEPOINT ", name)
}

func (db *DB) savepointStmt(ctx context.Context, tx Querier, verb, name string) error {
	if !sqlident.Valid(name) {
		return fmt.Errorf("%w: savepoint name %q", dblock.ErrInvalidOption, name)
	}
	_, err := tx.ExecContext(ctx, verb+name)
	return db.Classify(err)
}

// SavepointGone reports whether err says a savepoint does not exist (MySQL
// 1305), which on MySQL means the server ended the whole transaction.
func SavepointGone(err error) bool {
	return mysqlError(err, 1305)
}
