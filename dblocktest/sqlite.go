package dblocktest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // SQLite's driver, for SQLite.
	"github.com/dblock-go/dblock/migrations"
)

// SQLite returns a real database for t: a migrated SQLite file of its own in
// t's temporary directory, closed when t ends. Use it to run the code
// under test against the real lock modes, beside the in-memory Locker.
func SQLite(t testing.TB) *dialect.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := dialect.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "dblock.db"))
	if err != nil {
		t.Fatalf("dblocktest: open SQLite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("dblocktest: migrate SQLite: %v", err)
	}
	return db
}
