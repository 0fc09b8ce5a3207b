package userrows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // The example runs on an SQLite file.
	"github.com/dblock-go/dblock/migrations"
	"github.com/dblock-go/dblock/userrows"
)

// exampleDB opens a migrated SQLite database in a temporary directory; the
// returned function closes it and removes the directory.
func exampleDB() (*dialect.DB, func()) {
	dir, err := os.MkdirTemp("", "dblock-example")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	db, err := dialect.Open(ctx, "sqlite://"+filepath.Join(dir, "rows.db"))
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db); err != nil {
		panic(err)
	}
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

// CAS updates a user's versioned row only if nobody changed it since it was read.
func ExampleCAS() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER, version INTEGER);
INSERT INTO account VALUES (7, 100, 1)`); err != nil {
		panic(err)
	}
	p := userrows.CASParams{Table: "account", KeyColumn: "id", VersionColumn: "version", Key: 7,
		Expected: 1, Set: map[string]any{"balance": 80}}
	v, err := userrows.CAS(ctx, db, nil, p)
	fmt.Println("version:", v, err)

	_, err = userrows.CAS(ctx, db, nil, p) // Still expects version 1.
	var conflict *dblock.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println("conflict: want", conflict.Want, "found", conflict.Found)
	}
	// Output:
	// version: 2 <nil>
	// conflict: want 1 found 2
}
