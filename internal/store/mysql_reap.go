package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
)

// MySQL's and MariaDB's reaper engine: a batch reads its candidates without
// locking, then, in a READ COMMITTED transaction, locks by primary key with
// SKIP LOCKED those still stale and changes exactly the rows it locked. An
// idle batch first raises the fencing floor, in a statement of its own that
// never waits for the fence row (MySQL 8 locks it with NOWAIT first,
// LockFloor; MariaDB's raise fails at once).

func (d mysqlDialect) reapExpired(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	s := d.Reap()
	return db.reapMySQL(ctx, p, s.ExpiredCandidates, s.LockExpired, s.FreeLocked, false)
}

func (d mysqlDialect) reapWaiters(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	s := d.Reap()
	return db.reapMySQL(ctx, p, s.WaiterCandidates, s.LockWaiters, s.DeleteLockedWaiters, true)
}

// reapIdle raises the floor to the candidates' highest version and commits,
// then locks and deletes the candidates still idle at most that version.
func (d mysqlDialect) reapIdle(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	s := d.Reap()
	age := p.Age.Microseconds()
	var res ReapResult
	names, maxVersion, err := db.idleCandidates(ctx, s.IdleCandidates, age, p.Limit)
	if err != nil || len(names) == 0 {
		return res, err
	}
	res.More = len(names) >= p.Limit
	if err := db.raiseFloor(ctx, maxVersion); err != nil {
		return ReapResult{}, err
	}
	err = db.reapTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
		args := append(append(names, age), maxVersion)
		locked, err := db.candidatesTx(ctx, tx, ListPlaceholders(s.LockIdle, len(names)), args...)
		if err != nil || len(locked) == 0 {
			return err
		}
		res.Rows, err = db.deleteIdle(ctx, tx, locked, age, maxVersion)
		res.MaxVersion = maxVersion
		return err
	})
	if res.Rows == 0 {
		// Every candidate was locked or changed: no progress to make now.
		res.More = false
	}
	return res, err
}

// checkFloor checks that the fencing floor's row exists.
func (mysqlDialect) checkFloor(ctx context.Context, db *DB) error {
	_, err := db.readFloor(ctx, db)
	return db.Classify(err)
}

// reapMySQL runs a three-step batch: a non-locking read of candidates, then,
// in a READ COMMITTED transaction, a SKIP LOCKED lock of the candidates still
// stale and the change of exactly those. withAge passes p.Age to every
// statement (waiters); leases use the clock alone.
func (db *DB) reapMySQL(ctx context.Context, p ReapParams, candQ, lockQ, changeQ string, withAge bool) (ReapResult, error) {
	var extra []any
	if withAge {
		extra = []any{p.Age.Microseconds()}
	}
	cands, err := db.candidates(ctx, candQ, append(extra, p.Limit)...)
	if err != nil || len(cands) == 0 {
		return ReapResult{}, err
	}
	res := ReapResult{More: len(cands) >= p.Limit}
	err = db.reapTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
		locked, err := db.candidatesTx(ctx, tx, ListPlaceholders(lockQ, len(cands)), append(cands, extra...)...)
		if err != nil || len(locked) == 0 {
			return err
		}
		r, err := tx.ExecContext(ctx, ListPlaceholders(changeQ, len(locked)), append(locked, extra...)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		res.Rows = int(n)
		return err
	})
	if res.Rows == 0 {
		res.More = false
	}
	return res, err
}

// candidates reads one column of keys (names or ids) without locking.
func (db *DB) candidates(ctx context.Context, query string, args ...any) ([]any, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, db.Classify(err)
	}
	out, err := scanKeys(rows)
	return out, db.Classify(err)
}

// candidatesTx reads one column of keys in tx: the candidates a locking
// read locked. Errors are unclassified (reapTx classifies them).
func (db *DB) candidatesTx(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]any, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanKeys(rows)
}

// scanKeys reads one column of keys (names or ids) and closes rows.
func scanKeys(rows *sql.Rows) ([]any, error) {
	defer rows.Close()
	var out []any
	for rows.Next() {
		var k any
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// idleCandidates reads (name, version) rows without locking and returns the
// names and the highest version.
func (db *DB) idleCandidates(ctx context.Context, query string, args ...any) ([]any, int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, db.Classify(err)
	}
	names, maxVersion, err := scanIdle(rows)
	return names, maxVersion, db.Classify(err)
}

// Pauses between the attempts of a MySQL floor raise that found the fence
// row locked by acquisitions.
const (
	raiseRetryMin = time.Millisecond
	raiseRetryMax = 50 * time.Millisecond
)

// raiseFloor makes the fencing floor at least v and commits (MySQL), unless
// it is already there. The raise never waits for the fence row: while
// acquisitions hold shared locks on it, the attempt fails at once and is
// repeated after a growing, jittered pause until ctx ends. (A raise that
// waited would make every acquisition skip the row, and retry, for as long
// as it waited.)
func (db *DB) raiseFloor(ctx context.Context, v int64) error {
	floor, err := db.readFloor(ctx, db)
	if err != nil {
		return db.Classify(err)
	}
	if floor >= v {
		return nil
	}
	pause := raiseRetryMin
	for attempt := 1; ; attempt++ {
		err := db.raiseOnce(ctx, v)
		if err == nil {
			return nil
		}
		if !errors.Is(err, dblock.ErrNotAcquired) {
			return err
		}
		t := time.NewTimer(backoff.Jitter(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("raise the fencing floor: fence row still locked after %d attempts: %w", attempt, err)
		case <-t.C:
		}
		pause = min(2*pause, raiseRetryMax)
	}
}

// raiseOnce is one attempt of raiseFloor; an error wrapping
// dblock.ErrNotAcquired means the fence row was locked.
func (db *DB) raiseOnce(ctx context.Context, v int64) error {
	s := db.Dialect.Reap()
	if s.LockFloor == "" {
		_, err := db.ExecContext(ctx, s.RaiseFloor, v)
		return db.Classify(err)
	}
	return db.reapTx(ctx, nil, func(tx *sql.Tx) error {
		var floor int64
		if err := tx.QueryRowContext(ctx, s.LockFloor).Scan(&floor); err != nil {
			return err
		}
		if floor >= v {
			return nil
		}
		_, err := tx.ExecContext(ctx, s.RaiseFloor, v)
		return err
	})
}
