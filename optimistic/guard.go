package optimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
)

// Tx is what Guard runs in: the caller's *sql.Tx or *sqlx.Tx.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Guard checks, inside the caller's own transaction tx, that lease still
// holds its name (same owner and token, unexpired by the database clock) and
// keeps it so until tx ends: on PostgreSQL and MySQL the lock row is read
// with a shared lock, so no takeover, release or renewal can change it before
// commit; on SQLite the caller's write transaction already excludes every
// other writer. Write to the protected tables after Guard, in the same
// transaction, and the writes commit only while the lock is really held.
// When Guard has to wait for another transaction's lock on the row (a
// pessimistic holder that took the name once the lease ran out), the expiry
// is checked by the clock after the wait (on MySQL and MariaDB, whose clock
// is the statement's start, by running the check a second time).
//
// A holder that freezes (or is partitioned) inside tx after Guard must not
// keep the name forever, so Guard bounds tx by the lease:
//   - PostgreSQL: Guard sets idle_in_transaction_session_timeout, for tx only,
//     to the lease's time left by the database clock (or keeps the session's
//     value if shorter). A tx left idle past the lease is ended by the server
//     (its session closed) and rolled back, and another owner acquires. The
//     renewal of the lease waits for tx (the row is share-locked), so keep tx
//     shorter than the lease's time left, which Lease.Deadline bounds from
//     below.
//   - MySQL and MariaDB cannot bound one transaction: MariaDB's
//     idle_transaction_timeout is a session variable (SET STATEMENT scopes it
//     to one statement only, and a session value would outlive tx on a pooled
//     connection), and MySQL has no such setting. Guard therefore leaves the
//     session alone: set idle_transaction_timeout (MariaDB) for the
//     application's sessions yourself, e.g. in the DSN
//     (?idle_transaction_timeout=30), and keep wait_timeout and TCP keepalives
//     bounded, or a holder frozen inside tx blocks the name until the server
//     drops its session.
//   - SQLite is single-host: a frozen holder's write transaction blocks every
//     writer of the database, whatever Guard does.
//
// When the lease no longer holds, Guard returns an error wrapping
// dblock.ErrNotHeld and the *dblock.LostError saying why (ErrLost with
// ErrExpired, ErrTakenOver or ErrForceReleased, or ErrReleased after
// Release), and marks the lease lost. Roll tx back then. When tx's session
// is gone (the server ended it, for instance after its
// idle_transaction_timeout while the process was frozen), Guard cannot tell
// and returns an error wrapping dblock.ErrUnavailable: nothing in tx can
// commit, so roll it back and guard a new transaction, which answers.
func (l *Locker) Guard(ctx context.Context, tx Tx, lease *dblock.Lease) error {
	if tx == nil || lease == nil {
		return fmt.Errorf("optimistic: guard: %w: nil transaction or lease", dblock.ErrInvalidOption)
	}
	name := lease.Name()
	if err := lease.Err(); err != nil {
		return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, err)
	}
	ok, err := l.db.GuardLease(ctx, tx, name, lease.Owner(), lease.Token())
	if err != nil {
		return fmt.Errorf("optimistic: guard %q: %w", name, err)
	}
	if ok {
		return nil
	}
	reason := l.keeper.Lost(ctx, lease)
	if err := lease.Err(); err != nil && !errors.Is(err, dblock.ErrReleased) {
		return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, err)
	}
	return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, &dblock.LostError{Name: name, Reason: reason})
}
