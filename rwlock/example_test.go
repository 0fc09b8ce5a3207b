package rwlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/rwlock"
)

// Readers share a name; a writer has it alone.
func Example() {
	db, cleanup := exampledb.Open("rwlock.db")
	defer cleanup()
	var log []string
	serve := func(context.Context) error { log = append(log, "served"); return nil }
	rebuild := func(context.Context) error { log = append(log, "rebuilt"); return nil }
	if err := readThenWrite(context.Background(), db, serve, rebuild); err != nil {
		panic(err)
	}
	fmt.Println(log)
	// Output: [served rebuilt]
}

// readThenWrite is the README's example.
func readThenWrite(ctx context.Context, db *dialect.DB, serve, rebuild func(context.Context) error) error {
	rw, err := rwlock.New(db, nil)
	if err != nil {
		return err
	}
	defer rw.Close()
	if err := rw.DoRead(ctx, "catalog", func(ctx context.Context) error { return serve(ctx) }); err != nil { // shared
		return err
	}
	return rw.Do(ctx, "catalog", func(ctx context.Context) error { return rebuild(ctx) }) // exclusive
}

// The package doc's example: DoRead, then Do.
func ExampleLocker_DoRead() {
	db, cleanup := exampledb.Open("rwlock-doc.db")
	defer cleanup()
	ctx := context.Background()
	serve := func(context.Context) error { fmt.Println("serving"); return nil }
	rebuild := func(context.Context) error { fmt.Println("rebuilding"); return nil }
	l, _ := rwlock.New(db, nil)
	readErr := l.DoRead(ctx, "catalog", func(ctx context.Context) error { return serve(ctx) })
	writeErr := l.Do(ctx, "catalog", func(ctx context.Context) error { return rebuild(ctx) })
	fmt.Println(readErr, writeErr)
	_ = l.Close()
	// Output:
	// serving
	// rebuilding
	// <nil> <nil>
}

// Two readers at once; a writer is refused until both leave.
func ExampleLocker_TryAcquireRead() {
	db, cleanup := exampledb.Open("rwlock-try.db")
	defer cleanup()
	ctx := context.Background()
	l, _ := rwlock.New(db, nil)
	defer l.Close()
	a, _ := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("a"))
	b, _ := l.TryAcquireRead(ctx, "doc", dblock.WithOwner("b"))
	_, err := l.TryAcquire(ctx, "doc", dblock.WithOwner("w"))
	var held *dblock.HeldError
	fmt.Println(errors.As(err, &held), held.Mode)
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	w, err := l.TryAcquire(ctx, "doc", dblock.WithOwner("w"))
	fmt.Println(err, w.Token() > a.Token())
	_ = w.Release(ctx)
	// Output:
	// true read
	// <nil> true
}
