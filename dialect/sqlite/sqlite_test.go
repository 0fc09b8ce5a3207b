package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite"
)

// TestOwnership: Close closes a pool Open opened, and leaves one given to
// New to its owner.
func TestOwnership(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "own.db")
	opened, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Kind() != dialect.SQLite {
		t.Errorf("Kind = %q, want sqlite", opened.Kind())
	}
	raw := opened.SQL()
	if err := opened.Close(); err != nil {
		t.Fatal(err)
	}
	if err := raw.PingContext(ctx); err == nil {
		t.Error("the pool Open opened still answers after Close")
	}

	mine, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "mine.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	wrapped, err := dialect.New(ctx, mine, dialect.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if wrapped.SQL() != mine {
		t.Error("SQL() is not the *sql.DB given to New")
	}
	if err := wrapped.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mine.PingContext(ctx); err != nil {
		t.Errorf("the caller's pool after Close: %v, want it open", err)
	}
}
