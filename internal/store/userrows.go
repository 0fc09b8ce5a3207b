package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/sqlident"
)

// userRowsEngine is the binding of the application's own rows on one database (see engine).
type userRowsEngine interface {
	// checkUserRows refuses the options of p that the database cannot
	// honour (errors wrap dblock.ErrInvalidOption).
	checkUserRows(p UserRowsParams) error
	// userRowsQuery readies tx for LockUserRows' locking read of table
	// (quoted) by col (quoted), whose plain SELECT is query, and returns the
	// read's text; its errors are classified.
	userRowsQuery(ctx context.Context, db *DB, tx Querier, table, col, query string, p UserRowsParams) (string, error)
}

// QuoteIdent validates an identifier (optionally schema.table) and quotes it
// for the dialect (sqlident.Quote). Errors wrap dblock.ErrInvalidOption.
func (db *DB) QuoteIdent(ident string) (string, error) {
	return sqlident.Quote(ident, db.Dialect.IdentQuote(), true)
}

// UserRowsParams are the inputs of LockUserRows.
type UserRowsParams struct {
	Table, KeyColumn string // Validated and quoted.
	Keys             []any
	NoWait           bool // Fail at once (dblock.ErrNotAcquired) if any row is locked.
	SkipLocked       bool // Lock the rows that are free and skip the others.
}

// LockUserRows locks the rows of a user's table whose key is in p.Keys, in
// key order (the database sorts, so callers locking overlapping sets never
// deadlock on each other), inside tx. It returns the keys locked, as the
// database returns them, in that order.
//
// On MySQL and MariaDB the key column must be indexed: a locking read locks
// every row it scans, so without an index it locks the whole table (and
// deadlocks with every other locker of it).
//
// SQLite has no row locks: LockUserRows takes the database's write lock in
// tx (a write to the table that changes nothing, so it holds even in a
// transaction begun DEFERRED, waiting per the connection's busy timeout), and
// the write transaction is the lock of every row. NoWait and SkipLocked,
// which need row locks, are refused there (dblock.ErrInvalidOption).
func (db *DB) LockUserRows(ctx context.Context, tx Querier, p UserRowsParams) ([]any, error) {
	if p.NoWait && p.SkipLocked {
		return nil, fmt.Errorf("%w: NoWait and SkipLocked are exclusive", dblock.ErrInvalidOption)
	}
	if err := db.Dialect.checkUserRows(p); err != nil {
		return nil, err
	}
	table, err := db.QuoteIdent(p.Table)
	if err != nil {
		return nil, err
	}
	col, err := db.QuoteIdent(p.KeyColumn)
	if err != nil {
		return nil, err
	}
	if strings.Contains(p.KeyColumn, ".") {
		return nil, fmt.Errorf("%w: key column %q must not be qualified", dblock.ErrInvalidOption, p.KeyColumn)
	}
	if len(p.Keys) == 0 {
		return nil, nil
	}
	ph := make([]string, len(p.Keys))
	for i := range p.Keys {
		ph[i] = db.Dialect.Placeholder(i + 1)
	}
	query := fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s) ORDER BY %s", col, table, col, strings.Join(ph, ", "), col)
	query, err = db.Dialect.userRowsQuery(ctx, db, tx, table, col, query, p)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, query, p.Keys...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var k any
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		if b, ok := k.([]byte); ok {
			k = string(b)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, db.Classify(err)
	}
	return keys, nil
}

// ---- helpers ----
