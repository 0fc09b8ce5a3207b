// Command pgxpool is the floor of internal/deps' size comparison: a
// program that connects with pgxpool and runs one statement.
package main

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DSN"))
	if err != nil {
		os.Exit(1)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		os.Exit(1)
	}
}
