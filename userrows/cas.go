package userrows

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/sqlident"
	"github.com/dblock-go/dblock/internal/store"
)

// CASRetry's pauses between conflicts: capped, jittered, doubling.
const (
	retryMin = 5 * time.Millisecond
	retryMax = 250 * time.Millisecond
)

// Execer is what CAS runs on: a *sql.DB, *sql.Tx or *sql.Conn (or the sqlx types).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CASParams describe one compare-and-swap on a user's versioned row.
type CASParams struct {
	// Table is the table's name, optionally schema-qualified ("app.orders").
	Table string
	// KeyColumn is the column that identifies the row (usually the primary key).
	KeyColumn string
	// VersionColumn is an integer column bumped by every successful CAS.
	VersionColumn string
	// Key is the row's key value (a bind parameter).
	Key any
	// Expected is the version the caller read; the update applies only if the
	// row still has it, and sets the version to Expected+1.
	Expected int64
	// Set maps columns to their new values (bind parameters). It must not
	// name the key or the version column; it may be empty (a version bump).
	Set map[string]any
}

// CAS updates the row whose KeyColumn is Key, setting Set and bumping
// VersionColumn to Expected+1, only while its version is Expected. It returns
// the new version, or an error wrapping a *dblock.ConflictError (matching
// dblock.ErrConflict) with the version found (-1 when the row is missing).
// Identifiers are validated and quoted for db's dialect; values always travel
// as bind parameters. q is where it runs: nil for db's pool, or the caller's
// transaction. Bad identifiers wrap dblock.ErrInvalidOption.
func CAS(ctx context.Context, handle *dialect.DB, q Execer, p CASParams) (int64, error) {
	return cas(ctx, store.Of(handle), q, p)
}

// cAS is CAS on the store.
func cas(ctx context.Context, db *store.DB, q Execer, p CASParams) (int64, error) {
	if db == nil {
		return 0, fmt.Errorf("userrows: cas: %w: nil database", dblock.ErrInvalidOption)
	}
	if q == nil {
		q = db.DB
	}
	update, read, args, err := casSQL(db.Dialect, p)
	if err != nil {
		return 0, fmt.Errorf("userrows: cas %s: %w", p.Table, err)
	}
	r, err := q.ExecContext(ctx, update, args...)
	if err != nil {
		return 0, fmt.Errorf("userrows: cas %s: %w", p.Table, db.Classify(err))
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("userrows: cas %s: %w", p.Table, err)
	}
	if n > 0 {
		return p.Expected + 1, nil
	}
	found := int64(-1)
	var v sql.NullInt64
	err = q.QueryRowContext(ctx, read, p.Key).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, fmt.Errorf("userrows: cas %s: read version after conflict: %w", p.Table, db.Classify(err))
	case v.Valid:
		found = v.Int64
	}
	return 0, fmt.Errorf("userrows: cas: %w", &dblock.ConflictError{Table: p.Table, Key: p.Key, Want: p.Expected, Found: found})
}

// CASRetry runs read-then-CAS up to attempts times: read re-reads the row and
// returns the CAS to try (with the version it saw as Expected). A conflict
// is retried after a capped, jittered backoff; any other error, from read or
// from CAS, ends at once. After the last conflict it returns that
// *dblock.ConflictError.
func CASRetry(ctx context.Context, handle *dialect.DB, q Execer, attempts int, read func(ctx context.Context) (CASParams, error)) (int64, error) {
	db := store.Of(handle)
	if attempts < 1 {
		return 0, fmt.Errorf("userrows: cas retry: %w: attempts %d, want at least 1", dblock.ErrInvalidOption, attempts)
	}
	pause := retryMin
	for attempt := 1; ; attempt++ {
		p, err := read(ctx)
		if err != nil {
			return 0, err
		}
		v, err := cas(ctx, db, q, p)
		if err == nil || !errors.Is(err, dblock.ErrConflict) || attempt == attempts {
			return v, err
		}
		t := time.NewTimer(backoff.Jitter(pause))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		pause = min(pause*2, retryMax)
	}
}

func casSQL(d store.Dialect, p CASParams) (update, read string, args []any, err error) {
	return guardedUpdateSQL(d, p.Table, p.KeyColumn, p.VersionColumn, "version", p.Set, p.Key,
		p.Expected+1, func(col, ph string) string { return col + " = " + ph }, p.Expected)
}

// guardedUpdateSQL builds UPDATE table SET <set>, ctl = ctlValue WHERE key =
// Key AND cond(ctl, condValue), and the read of ctl by key that explains a
// refusal. Identifiers are validated and quoted; every value is a bind
// parameter. what names ctl's role in errors ("version", "fence").
func guardedUpdateSQL(d store.Dialect, tableName, keyColumn, ctlColumn, what string, set map[string]any, keyValue, ctlValue any,
	cond func(col, placeholder string) string, condValue any) (update, read string, args []any, err error) {
	table, err := quoteTable(d, tableName)
	if err != nil {
		return "", "", nil, err
	}
	key, err := quoteIdent(d, keyColumn)
	if err != nil {
		return "", "", nil, err
	}
	ctl, err := quoteIdent(d, ctlColumn)
	if err != nil {
		return "", "", nil, err
	}
	if keyColumn == ctlColumn {
		return "", "", nil, fmt.Errorf("%w: key and %s column are both %q", dblock.ErrInvalidOption, what, keyColumn)
	}
	cols := make([]string, 0, len(set))
	for c := range set {
		cols = append(cols, c)
	}
	slices.Sort(cols) // A stable statement text, so the database can reuse its plan.
	var b strings.Builder
	b.WriteString("UPDATE " + table + " SET ")
	for _, c := range cols {
		if c == keyColumn || c == ctlColumn {
			return "", "", nil, fmt.Errorf("%w: Set names the key or %s column %q", dblock.ErrInvalidOption, what, c)
		}
		qc, err := quoteIdent(d, c)
		if err != nil {
			return "", "", nil, err
		}
		args = append(args, set[c])
		b.WriteString(qc + " = " + d.Placeholder(len(args)) + ", ")
	}
	args = append(args, ctlValue, keyValue, condValue)
	n := len(args)
	b.WriteString(ctl + " = " + d.Placeholder(n-2) + " WHERE " + key + " = " + d.Placeholder(n-1) +
		" AND " + cond(ctl, d.Placeholder(n)))
	read = "SELECT " + ctl + " FROM " + table + " WHERE " + key + " = " + d.Placeholder(1)
	return b.String(), read, args, nil
}

// quoteTable and quoteIdent quote a user's table (optionally schema.table)
// and column for d (see sqlident.Quote).
func quoteTable(d store.Dialect, table string) (string, error) {
	return sqlident.Quote(table, d.IdentQuote(), true)
}

func quoteIdent(d store.Dialect, id string) (string, error) {
	return sqlident.Quote(id, d.IdentQuote(), false)
}
