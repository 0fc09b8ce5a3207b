package userrows_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/userrows"
)

// CAS updates a user's versioned row only if nobody changed it since it was read.
func ExampleCAS() {
	db, cleanup := exampledb.Open("rows.db")
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
