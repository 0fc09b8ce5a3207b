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
//
// When the lease no longer holds, Guard returns an error wrapping
// dblock.ErrNotHeld and the *dblock.LostError saying why (ErrLost with
// ErrExpired, ErrTakenOver or ErrForceReleased, or ErrReleased after
// Release), and marks the lease lost. Roll tx back then.
func (l *Locker) Guard(ctx context.Context, tx Tx, lease *dblock.Lease) error {
	if tx == nil || lease == nil {
		return fmt.Errorf("optimistic: guard: %w: nil transaction or lease", dblock.ErrInvalidOption)
	}
	name := lease.Name()
	if err := lease.Err(); err != nil {
		return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, err)
	}
	var one int
	err := tx.QueryRowContext(ctx, l.db.Dialect.Lease().Guard, name, lease.Owner(), int64(lease.Token())).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("optimistic: guard %q: %w", name, l.db.Classify(err))
	}
	reason := l.keeper.Lost(ctx, lease)
	if err := lease.Err(); err != nil && !errors.Is(err, dblock.ErrReleased) {
		return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, err)
	}
	return fmt.Errorf("optimistic: guard %q: %w: %w", name, dblock.ErrNotHeld, &dblock.LostError{Name: name, Reason: reason})
}
