package dblocktest

import (
	"testing"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // SQLite's driver, for SQLite.
	"github.com/dblock-go/dblock/internal/isolate"
	"github.com/dblock-go/dblock/internal/store"
)

// SQLite returns a real database for t: a migrated SQLite file of its own in
// t's temporary directory, closed when t ends. Use it to run the code
// under test against the real lock modes, beside the in-memory Locker.
func SQLite(t testing.TB) *dialect.DB {
	t.Helper()
	db := isolate.Open(t, isolate.DSN(t, nil, store.SQLite, "", "dblock"))
	migrate(t, db)
	return db
}
