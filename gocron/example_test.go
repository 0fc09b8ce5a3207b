package dblockgocron_test

import (
	"fmt"

	"github.com/go-co-op/gocron/v2"

	"github.com/dblock-go/dblock/gocron"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/optimistic"
)

// gocron with dblock's Locker: one run of a job at a time across schedulers.
func ExampleLocker() {
	db, cleanup := exampledb.Open("gocron.db")
	defer cleanup()
	l, _ := optimistic.New(db, nil)
	defer l.Close()
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(dblockgocron.Locker(l)))
	fmt.Println(s.Shutdown())
	// Output: <nil>
}
