package exampledb

import (
	"context"
	"os"
	"path/filepath"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // The examples run on an SQLite file.
	"github.com/dblock-go/dblock/migrations"
)

// Open opens a migrated SQLite database named file in a new temporary
// directory and runs setup (the example's own tables) on it. The returned
// function closes the database and removes the directory. It panics on
// error: an example has no *testing.T to fail.
func Open(file string, setup ...string) (*dialect.DB, func()) {
	dir, err := os.MkdirTemp("", "dblock-example")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	db, err := dialect.Open(ctx, "sqlite://"+filepath.Join(dir, file))
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db); err != nil {
		panic(err)
	}
	for _, stmt := range setup {
		if _, err := db.SQL().ExecContext(ctx, stmt); err != nil {
			panic(err)
		}
	}
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}
