package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
)

// HistorySQL are the statements of the acquisition history (the table
// dblock_history, written by a trigger on dblock_locks while enabled).
type HistorySQL struct {
	// Enable creates (or replaces) the trigger, one statement each, run in
	// order in one transaction where the database's DDL is transactional.
	Enable []string
	// Disable drops the trigger.
	Disable []string
	// Enabled counts the trigger (0 or 1).
	Enabled string
	// List reads the entries that ended within a span (µs) before the
	// database clock, newest first, up to a limit; ListName the same for
	// one name (its first argument).
	List, ListName string
	// Prune deletes up to a limit (second argument) of the entries that
	// ended longer than a retention (µs, first argument) ago.
	Prune string
}

// The ways an acquisition ends, as the history's trigger names them.
const (
	HistoryReleased      = "released"
	HistoryExpired       = "expired"
	HistoryTakenOver     = "taken_over"
	HistoryForceReleased = "force_released"
)

// HistoryEntry is one ended acquisition.
type HistoryEntry struct {
	Name, Owner, Mode, How, Metadata string
	Token                            int64
	AcquiredAt, EndedAt              time.Time
}

// HistorySupported reports whether the database can keep the history
// (not MySQL 8: see mysqlHistory; MariaDB can).
func (db *DB) HistorySupported() bool { return db.Dialect.History().Enabled != "" }

// errNoHistory is the error of a history call on a database without one.
func (db *DB) errNoHistory(what string) error {
	return fmt.Errorf("%s: %w: the acquisition history is not available on MySQL 8 (a trigger on dblock_locks would hide the insert id its tokens are read from); MariaDB and PostgreSQL keep one",
		what, dblock.ErrInvalidOption)
}

// EnableHistory adds the trigger that records every acquisition of
// dblock_locks when it ends. Doing it again changes nothing.
func (db *DB) EnableHistory(ctx context.Context) error {
	if !db.HistorySupported() {
		return db.errNoHistory("enable history")
	}
	return db.runDDL(ctx, "enable history", db.Dialect.History().Enable)
}

// DisableHistory drops the trigger; the recorded entries stay.
func (db *DB) DisableHistory(ctx context.Context) error {
	if !db.HistorySupported() {
		return db.errNoHistory("disable history")
	}
	return db.runDDL(ctx, "disable history", db.Dialect.History().Disable)
}

func (db *DB) runDDL(ctx context.Context, what string, stmts []string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, db.Dialect.Classify(err))
	}
	defer func() { _ = tx.Rollback() }()
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", what, db.Dialect.Classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: %w", what, db.Dialect.Classify(err))
	}
	return nil
}

// HistoryEnabled reports whether the trigger is in place.
func (db *DB) HistoryEnabled(ctx context.Context) (bool, error) {
	if !db.HistorySupported() {
		return false, nil
	}
	var n int
	if err := db.QueryRowContext(ctx, db.Dialect.History().Enabled).Scan(&n); err != nil {
		return false, fmt.Errorf("history enabled: %w", db.Dialect.Classify(err))
	}
	return n > 0, nil
}

// allTime is the span ListHistory reads when it is given none.
const allTime = 100 * 365 * 24 * time.Hour

// ListHistory returns the entries of name ("" for every name) that ended
// within since (zero or less: any time) before the database clock, newest
// first, at most limit.
func (db *DB) ListHistory(ctx context.Context, name string, since time.Duration, limit int) ([]HistoryEntry, error) {
	if !db.HistorySupported() {
		return nil, db.errNoHistory("list history")
	}
	if since <= 0 {
		since = allTime
	}
	h := db.Dialect.History()
	q, args := h.List, []any{since.Microseconds(), limit}
	if name != "" {
		q, args = h.ListName, []any{name, since.Microseconds(), limit}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list history: %w", db.Dialect.Classify(err))
	}
	defer rows.Close()
	var out []HistoryEntry
	for rows.Next() {
		var e HistoryEntry
		var acquired, ended int64
		if err := rows.Scan(&e.Name, &e.Owner, &e.Token, &e.Mode, &acquired, &ended, &e.How, &e.Metadata); err != nil {
			return nil, fmt.Errorf("list history: %w", db.Dialect.Classify(err))
		}
		e.AcquiredAt, e.EndedAt = microsOrZero(acquired), Micros(ended)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list history: %w", db.Dialect.Classify(err))
	}
	return out, nil
}

// ReapHistory deletes up to p.Limit entries that ended longer than p.Age
// ago by the database clock (a batch of the reaper's, or of history.Prune).
func (db *DB) ReapHistory(ctx context.Context, p ReapParams) (ReapResult, error) {
	if !db.HistorySupported() {
		return ReapResult{}, db.errNoHistory("prune history")
	}
	res, err := db.ExecContext(ctx, db.Dialect.History().Prune, p.Age.Microseconds(), p.Limit)
	if err != nil {
		return ReapResult{}, fmt.Errorf("prune history: %w", db.Dialect.Classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ReapResult{}, fmt.Errorf("prune history: %w", db.Dialect.Classify(err))
	}
	return ReapResult{Rows: int(n), More: int(n) == p.Limit}, nil
}
