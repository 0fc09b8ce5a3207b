package history_test

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/optimistic"
)

// Record acquisitions, then read who held a name and how it ended.
func Example() {
	db, cleanup := exampledb.Open("history.db")
	defer cleanup()
	ctx := context.Background()
	if err := history.Enable(ctx, db); err != nil {
		panic(err)
	}
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		panic(err)
	}
	_ = lease.Release(ctx)

	entries, err := history.List(ctx, db, history.Query{Name: "invoice:42"})
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.Ended, e.Token == lease.Token())
	}
	// Output: invoice:42 released true
}
