package dblock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // The example runs on an SQLite file.
	"github.com/dblock-go/dblock/migrations"
	"github.com/dblock-go/dblock/optimistic"
)

// result and save stand for the caller's work and the resource it protects.
type result struct{ total int }

func save(_ context.Context, res result, token dblock.Token) error {
	fmt.Printf("saved %d under token %d\n", res.total, token)
	return nil
}

// quickStart is the README's quick start, word for word (TestDocsCompile
// checks that it stays so).
func quickStart(ctx context.Context, dsn string, work <-chan result) error {
	db, err := dialect.Open(ctx, dsn) // postgres://…, mysql://…, sqlite://…
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil { // or the goose CLI, below
		return err
	}

	locker, err := optimistic.New(db, nil)
	if err != nil {
		return err
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "invoice:42", dblock.WithWait(10*time.Second))
	if err != nil {
		// errors.Is(err, dblock.ErrNotAcquired): held elsewhere or the wait
		// ran out; a *dblock.HeldError in the chain names the holder.
		return err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	select {
	case <-lease.Done():
		return lease.Err() // lost: expired, taken over, or released by an administrator
	case res := <-work:
		return save(ctx, res, lease.Token()) // fencing: UPDATE … WHERE fence_token < $token
	}
}

// The README's quick start, run on an SQLite file.
func Example() {
	dir, err := os.MkdirTemp("", "dblock-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	work := make(chan result, 1)
	work <- result{total: 42}
	err = quickStart(context.Background(), "sqlite://"+filepath.Join(dir, "locks.db"), work)
	fmt.Println("err:", err, errors.Is(err, dblock.ErrNotAcquired))
	// Output:
	// saved 42 under token 1
	// err: <nil> false
}
