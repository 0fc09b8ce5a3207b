package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
	// Record writes the entry of an acquisition that ended without a
	// statement on dblock_locks (a pessimistic hold, which writes no
	// owner): name, owner, token, mode, acquired (µs since the epoch), how;
	// it ends at the database's clock.
	Record string
}

// The ways an acquisition ends, as the history names them: the trigger
// writes the first four, the pessimistic Locker the first and the last two.
const (
	HistoryReleased       = "released"
	HistoryExpired        = "expired"
	HistoryTakenOver      = "taken_over"
	HistoryForceReleased  = "force_released"
	HistoryConnectionLost = "connection_lost"
	HistoryAborted        = "aborted"
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
	defer db.history.forget()
	db.history.noteTrigger(true)
	return db.runDDL(ctx, "enable history", db.Dialect.History().Enable)
}

// DisableHistory drops the trigger; the recorded entries stay.
func (db *DB) DisableHistory(ctx context.Context) error {
	if !db.HistorySupported() {
		return db.errNoHistory("disable history")
	}
	defer db.history.forget()
	if err := db.runDDL(ctx, "disable history", db.Dialect.History().Disable); err != nil {
		return err
	}
	db.history.noteTrigger(false)
	return nil
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

// HistoryEnabled reports whether the trigger is in place (and refreshes
// what HistoryRecording knows).
func (db *DB) HistoryEnabled(ctx context.Context) (bool, error) {
	on, err := db.historyEnabled(ctx)
	if err == nil {
		db.history.mu.Lock()
		db.history.read(on)
		db.history.mu.Unlock()
	}
	return on, err
}

func (db *DB) historyEnabled(ctx context.Context) (bool, error) {
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

// historyProbeEvery is how long the writers of entries other than the
// trigger (pessimistic holds) trust a reading of whether the history is
// enabled: an Enable or Disable through another pool reaches them within
// this time, one through the same pool at once.
const historyProbeEvery = 5 * time.Second

// historyProbe caches whether the history is enabled (see HistoryRecording).
type historyProbe struct {
	mu      sync.Mutex
	checked time.Time // zero: read again
	on      bool

	// triggerUntil (unix ns): until when MariaDB's acquisitions read their
	// row instead of the OK packet (see returningAcquire).
	triggerUntil atomic.Int64
}

// triggerMemory is how long a trigger seen on dblock_locks keeps MariaDB's
// acquisitions on their RETURNING form; after it, one acquisition that
// meets the trigger again (an insert id of 0) renews it.
const triggerMemory = time.Minute

// noteTrigger records whether a trigger is on dblock_locks.
func (p *historyProbe) noteTrigger(on bool) {
	until := int64(0)
	if on {
		until = time.Now().Add(triggerMemory).UnixNano()
	}
	p.triggerUntil.Store(until)
}

// returningAcquire reports whether MariaDB's acquisitions read their row
// (LeaseSQL.AcquireReturning): while a trigger was seen on dblock_locks
// lately, when the OK packet's insert id cannot carry the token.
func (db *DB) returningAcquire() bool {
	return time.Now().UnixNano() < db.history.triggerUntil.Load()
}

// read records a reading of whether the history is enabled; p.mu is held.
func (p *historyProbe) read(on bool) {
	p.on, p.checked = on, time.Now()
	p.noteTrigger(on)
}

func (p *historyProbe) forget() {
	p.mu.Lock()
	p.checked = time.Time{}
	p.mu.Unlock()
}

// HistoryKnownOff reports, without a statement, whether the history was
// read as disabled less than historyProbeEvery ago.
func (db *DB) HistoryKnownOff() bool {
	p := &db.history
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.checked.IsZero() && time.Since(p.checked) < historyProbeEvery && !p.on
}

// HistoryRecording reports whether the history is enabled, as read at most
// historyProbeEvery ago; an unreadable answer counts as disabled until the
// next reading.
func (db *DB) HistoryRecording(ctx context.Context) bool {
	p := &db.history
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checked.IsZero() && time.Since(p.checked) < historyProbeEvery {
		return p.on
	}
	on, err := db.historyEnabled(ctx)
	if err != nil {
		// Off until the next reading; what the trigger memory knew stays.
		p.on, p.checked = false, time.Now()
		return false
	}
	p.read(on)
	return on
}

// RecordHistory writes the entry of an acquisition that ended without a
// statement on dblock_locks (e.AcquiredAt and e.How are used; EndedAt is
// the database's clock).
func (db *DB) RecordHistory(ctx context.Context, e HistoryEntry) error {
	if !db.HistorySupported() {
		return db.errNoHistory("record history")
	}
	var acquired any
	if !e.AcquiredAt.IsZero() {
		acquired = e.AcquiredAt.UnixMicro()
	}
	_, err := db.ExecContext(ctx, db.Dialect.History().Record, e.Name, e.Owner, e.Token, e.Mode, acquired, e.How)
	if err != nil {
		return fmt.Errorf("record history: %w", db.Dialect.Classify(err))
	}
	return nil
}
