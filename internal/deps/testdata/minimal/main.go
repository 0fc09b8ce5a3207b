// Command minimal is the smallest dblock program on PostgreSQL: open, try a
// lock, release. internal/deps compares its size with pgxpool's alone.
package main

import (
	"context"
	"os"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/postgres"
	"github.com/dblock-go/dblock/optimistic"
)

func main() {
	ctx := context.Background()
	db, err := dialect.Open(ctx, os.Getenv("DSN"))
	if err != nil {
		os.Exit(1)
	}
	defer db.Close()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		os.Exit(1)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "job")
	if err != nil {
		os.Exit(1)
	}
	_ = lease.Release(ctx)
}
