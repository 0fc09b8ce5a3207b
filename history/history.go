package history

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// How an acquisition ended (Entry.Ended).
const (
	Released      = store.HistoryReleased
	Expired       = store.HistoryExpired
	TakenOver     = store.HistoryTakenOver
	ForceReleased = store.HistoryForceReleased
	// ConnectionLost: a pessimistic hold's session ended (its connection
	// died, or the server ended it).
	ConnectionLost = store.HistoryConnectionLost
	// Aborted: the server rolled a pessimistic hold's transaction back (a
	// deadlock victim on MySQL or MariaDB).
	Aborted = store.HistoryAborted
)

// Entry is one ended acquisition.
type Entry struct {
	Name     string
	Owner    string
	Token    dblock.Token
	Mode     string // The acquisition's mode (dblock.ModeOptimistic, ModeFair, ModeWrite, ModeRead, ModePessimistic, ...)
	Metadata string
	// AcquiredAt is when the owner took the name (its first acquisition,
	// for a re-entered hold), EndedAt when the acquisition ended, both by
	// the database's clock.
	AcquiredAt, EndedAt time.Time
	// Ended says how it ended: Released, Expired, TakenOver, ForceReleased,
	// ConnectionLost or Aborted.
	Ended string
}

// Query selects entries. The zero value selects the newest LimitDefault
// entries of every name.
type Query struct {
	// Name selects one lock name; empty selects all.
	Name string
	// Since selects the entries that ended within this long before the
	// database's clock; zero selects any time.
	Since time.Duration
	// Limit bounds the entries returned (newest first). Defaults to
	// LimitDefault; at most LimitMax.
	Limit int
}

// Limits of Query.Limit.
const (
	LimitDefault = 100
	LimitMax     = 100000
)

// pruneBatch bounds the entries one statement of Prune deletes.
const pruneBatch = 1000

// Enable starts recording: it adds the trigger on dblock_locks (again:
// nothing changes). It needs the migrations applied.
func Enable(ctx context.Context, db *dialect.DB) error {
	s, err := storeOf(db, "enable")
	if err != nil {
		return err
	}
	if err := s.EnableHistory(ctx); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// Disable stops recording: it drops the trigger. The entries stay.
func Disable(ctx context.Context, db *dialect.DB) error {
	s, err := storeOf(db, "disable")
	if err != nil {
		return err
	}
	if err := s.DisableHistory(ctx); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// Enabled reports whether acquisitions are being recorded.
func Enabled(ctx context.Context, db *dialect.DB) (bool, error) {
	s, err := storeOf(db, "enabled")
	if err != nil {
		return false, err
	}
	on, err := s.HistoryEnabled(ctx)
	if err != nil {
		return false, fmt.Errorf("history: %w", err)
	}
	return on, nil
}

// List returns the entries q selects, newest first.
func List(ctx context.Context, db *dialect.DB, q Query) ([]Entry, error) {
	s, err := storeOf(db, "list")
	if err != nil {
		return nil, err
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = LimitDefault
	}
	rows, err := s.ListHistory(ctx, q.Name, q.Since, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = Entry{Name: r.Name, Owner: r.Owner, Token: dblock.Token(r.Token), Mode: r.Mode, Metadata: r.Metadata,
			AcquiredAt: r.AcquiredAt, EndedAt: r.EndedAt, Ended: r.How}
	}
	return out, nil
}

func (q Query) check() error {
	if q.Name != "" {
		if err := dblock.ValidateName(q.Name); err != nil {
			return fmt.Errorf("history: list: %w", err)
		}
	}
	if q.Since < 0 {
		return fmt.Errorf("history: list: %w: since %v is negative", dblock.ErrInvalidOption, q.Since)
	}
	if q.Limit < 0 || q.Limit > LimitMax {
		return fmt.Errorf("history: list: %w: limit %d out of range [0, %d]", dblock.ErrInvalidOption, q.Limit, LimitMax)
	}
	return nil
}

// Prune deletes the entries that ended longer than retention ago by the
// database's clock, in batches, and reports how many.
func Prune(ctx context.Context, db *dialect.DB, retention time.Duration) (int, error) {
	s, err := storeOf(db, "prune")
	if err != nil {
		return 0, err
	}
	if retention <= 0 {
		return 0, fmt.Errorf("history: prune: %w: retention %v is not positive", dblock.ErrInvalidOption, retention)
	}
	total := 0
	for {
		res, err := s.ReapHistory(ctx, store.ReapParams{Limit: pruneBatch, Age: retention})
		total += res.Rows
		if err != nil {
			return total, fmt.Errorf("history: %w", err)
		}
		if !res.More {
			return total, nil
		}
	}
}

func storeOf(db *dialect.DB, op string) (*store.DB, error) {
	s := store.Of(db)
	if s == nil || s.DB == nil {
		return nil, fmt.Errorf("history: %s: %w: nil database", op, dblock.ErrInvalidOption)
	}
	return s, nil
}
