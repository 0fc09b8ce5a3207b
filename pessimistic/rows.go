package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// ---- the dblock.Locker adapter ----

// AsLocker returns l as a dblock.Locker: Acquire and TryAcquire return the
// embedded *dblock.Lease (whose Release commits), and Do runs fn inside the
// locking transaction, committing when fn returns nil. Close closes l.
func (l *Locker) AsLocker() dblock.Locker { return adapter{l} }

type adapter struct{ l *Locker }

func (a adapter) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	lease, err := a.l.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return lease.Lease, nil
}

func (a adapter) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	lease, err := a.l.TryAcquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return lease.Lease, nil
}

func (a adapter) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return a.l.Do(ctx, name, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
}

func (a adapter) Close() error { return a.l.Close() }

// ---- users' own rows ----

// LockRowsParams name the rows of a user's table to lock.
type LockRowsParams struct {
	// Table and KeyColumn are identifiers (letters, digits, underscores;
	// Table may be schema-qualified), validated and quoted, never taken
	// from untrusted input.
	Table, KeyColumn string
	// Keys are the key values to lock (bind parameters).
	Keys []any
	// NoWait fails at once (dblock.ErrNotAcquired) if any row is locked.
	NoWait bool
	// SkipLocked locks the free rows and skips the locked ones
	// (work-queue style). Exclusive with NoWait.
	SkipLocked bool
}

// LockRows locks the rows of p.Table whose p.KeyColumn is in p.Keys inside
// the caller's transaction tx, in key order (so two callers locking
// overlapping sets never deadlock on each other), and returns the keys
// locked, in that order. Keys without a row are not returned; with
// SkipLocked neither are locked ones. The locks last until tx ends.
//
// On MySQL and MariaDB, p.KeyColumn must be indexed (a primary or unique
// key, or an index): InnoDB locks every row a locking read scans, so without
// an index LockRows locks the whole table.
//
// A deadlock with another transaction wraps dblock.ErrDeadlock. On MySQL the
// server rolls the victim's whole transaction back; LockRows then also ends
// tx (Rollback), so that later statements on it fail with sql.ErrTxDone
// instead of running, each committed on its own, outside any transaction; if
// tx was a lock's transaction, that lock is lost (ErrTxEnded).
//
// SQLite has no row locks: LockRows takes the database's write lock in tx
// (so it holds in a transaction begun DEFERRED too) and reads the keys;
// every row is then locked until tx ends. NoWait and SkipLocked are refused
// there with dblock.ErrInvalidOption.
func (l *Locker) LockRows(ctx context.Context, tx *sql.Tx, p LockRowsParams) ([]any, error) {
	if tx == nil {
		return nil, fmt.Errorf("pessimistic: lock rows of %q: %w: nil transaction", p.Table, dblock.ErrInvalidOption)
	}
	keys, err := l.db.LockUserRows(ctx, &sqlx.Tx{Tx: tx, Mapper: l.db.Mapper}, store.UserRowsParams{
		Table: p.Table, KeyColumn: p.KeyColumn, Keys: p.Keys, NoWait: p.NoWait, SkipLocked: p.SkipLocked,
	})
	if err != nil {
		if errors.Is(err, dblock.ErrDeadlock) && l.caps.TxEndsOnDeadlock {
			// MySQL rolled the victim's whole transaction back: if it was
			// a lock's transaction, that lock is gone; either way tx must
			// not run more statements outside a transaction.
			if h := l.holdOf(tx); h != nil {
				l.txTrouble(h, err)
			} else {
				_ = tx.Rollback()
			}
		}
		return nil, fmt.Errorf("pessimistic: lock rows of %q: %w", p.Table, err)
	}
	return keys, nil
}

// holdOf returns the live hold whose transaction is tx, if any.
func (l *Locker) holdOf(tx *sql.Tx) *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	for h := range l.all {
		if h.tx != nil && h.tx.Tx == tx && !h.ended {
			return h
		}
	}
	return nil
}
