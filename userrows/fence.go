package userrows

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// FenceParams describe one write to a user's row fenced by a lock's token.
type FenceParams struct {
	// Table is the table's name, optionally schema-qualified ("app.orders").
	Table string
	// KeyColumn is the column that identifies the row (usually the primary key).
	KeyColumn string
	// FenceColumn is an integer column (NULL allowed, read as 0) holding the
	// highest token that has written the row.
	FenceColumn string
	// Key is the row's key value (a bind parameter).
	Key any
	// Token is the writer's fencing token (Lease.Token()).
	Token dblock.Token
	// Set maps columns to their new values (bind parameters). It must not
	// name the key or the fence column; it may be empty.
	Set map[string]any
}

// FencedUpdate updates the row whose KeyColumn is Key, setting Set and
// FenceColumn to Token, only while the row's fence is not above Token: the
// database itself refuses a write from a holder that was superseded (its
// lease ran out while it was paused, and a newer holder, with a greater
// token, has written since). The holder may write many times with one token.
// It returns nil, or an error wrapping a *dblock.ConflictError (Fence true,
// matching dblock.ErrConflict) with the fence found (-1 when the row is
// missing). Identifiers are validated and quoted for db's dialect; values
// travel as bind parameters. q is where it runs: nil for db's pool, or the
// caller's transaction. Bad identifiers wrap dblock.ErrInvalidOption.
func FencedUpdate(ctx context.Context, handle *dialect.DB, q Execer, p FenceParams) error {
	db := store.Of(handle)
	if db == nil {
		return fmt.Errorf("userrows: fenced update: %w: nil database", dblock.ErrInvalidOption)
	}
	if p.Token <= 0 {
		return fmt.Errorf("userrows: fenced update %s: %w: token %d, want a lease's token (> 0)", p.Table, dblock.ErrInvalidOption, p.Token)
	}
	if q == nil {
		q = db.DB
	}
	token := int64(p.Token)
	update, read, args, err := guardedUpdateSQL(db.Dialect, p.Table, p.KeyColumn, p.FenceColumn, "fence", p.Set, p.Key,
		token, func(col, ph string) string { return "(" + col + " IS NULL OR " + col + " <= " + ph + ")" }, token)
	if err != nil {
		return fmt.Errorf("userrows: fenced update %s: %w", p.Table, err)
	}
	r, err := q.ExecContext(ctx, update, args...)
	if err != nil {
		return fmt.Errorf("userrows: fenced update %s: %w", p.Table, db.Classify(err))
	}
	n, err := r.RowsAffected()
	if err != nil {
		return fmt.Errorf("userrows: fenced update %s: %w", p.Table, err)
	}
	if n > 0 {
		return nil
	}
	// Nothing changed: a newer fence, no row, or (MySQL, which counts changed
	// rows only) a write that found the row already as asked.
	found := int64(-1)
	var v sql.NullInt64
	err = q.QueryRowContext(ctx, read, p.Key).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("userrows: fenced update %s: read the fence after a refusal: %w", p.Table, db.Classify(err))
	default:
		found = v.Int64 // NULL reads as 0.
		if found <= token {
			return nil
		}
	}
	return fmt.Errorf("userrows: fenced update: %w", &dblock.ConflictError{Table: p.Table, Key: p.Key, Want: token, Found: found, Fence: true})
}
