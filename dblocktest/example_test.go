package dblocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dblocktest"
	"github.com/dblock-go/dblock/optimistic"
)

// nightlyReport is the code under test: it holds "report" while it works,
// and stops when the lock is lost.
func nightlyReport(ctx context.Context, locker dblock.Locker, work func(context.Context) error) error {
	return locker.Do(ctx, "report", work)
}

// A job that loses its lock mid-run sees its context cancelled with the
// loss, and reports it.
func Example_lossHandling() {
	locker := dblocktest.New(nil)
	defer locker.Close()
	err := nightlyReport(context.Background(), locker, func(ctx context.Context) error {
		locker.Database().Expire("report") // the lease runs out while the job works
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println(errors.Is(err, dblock.ErrLost), errors.Is(err, dblock.ErrExpired))
	// Output: true true
}

// A holder cut off from its database keeps its lease until it runs out by
// the clock, which the test moves instead of sleeping.
func Example_expiry() {
	locker := dblocktest.New(nil)
	defer locker.Close()
	lease, _ := locker.Acquire(context.Background(), "report", dblock.WithTTL(30*time.Second))
	locker.Database().StopRenewing("report")
	locker.Clock().Advance(29 * time.Second)
	fmt.Println("after 29s:", lease.Err())
	locker.Clock().Advance(time.Second)
	fmt.Println("after 30s:", errors.Is(lease.Err(), dblock.ErrExpired))
	// Output:
	// after 29s: <nil>
	// after 30s: true
}

// Another replica holding the name: the job must skip, not wait.
func Example_contention() {
	locker := dblocktest.New(nil)
	defer locker.Close()
	locker.Database().TakeOver("report", "replica-2")
	_, err := locker.TryAcquire(context.Background(), "report")
	var held *dblock.HeldError
	fmt.Println(errors.As(err, &held), held.Owner)
	// Output: true replica-2
}

// The same code against a real database: a migrated SQLite file per test.
func TestNightlyReportOnSQLite(t *testing.T) {
	locker, err := optimistic.New(dblocktest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ran := false
	if err := nightlyReport(context.Background(), locker, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("report on SQLite: ran %v, %v", ran, err)
	}
}
