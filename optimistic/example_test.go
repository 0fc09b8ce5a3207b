package optimistic_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/optimistic"
)

// A lock held while a job runs, renewed in the background, released after.
func ExampleLocker_Do() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost while the job runs.
		fmt.Println("generating the report")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// generating the report
	// done: <nil>
}

// TryAcquire returns at once when another owner holds the name, naming it.
func ExampleLocker_TryAcquire() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.TryAcquire(ctx, "invoice:42", dblock.WithOwner("worker-a"))
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "invoice:42", dblock.WithOwner("worker-b"))
	var held *dblock.HeldError
	if errors.Is(err, dblock.ErrNotAcquired) && errors.As(err, &held) {
		fmt.Println("held by", held.Owner)
	}
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released")
	// Output:
	// held by worker-a
	// released
}

// A lease with an explicit TTL is not renewed: Done closes when it runs out,
// Err says why, and fencing tokens only grow.
func ExampleLocker_Acquire_expiry() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	first, err := locker.Acquire(ctx, "migrator", dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	<-first.Done()
	fmt.Println("expired:", errors.Is(first.Err(), dblock.ErrExpired))

	second, err := locker.Acquire(ctx, "migrator")
	if err != nil {
		panic(err)
	}
	fmt.Println("newer token:", second.Token() > first.Token())
	fmt.Println("old release:", errors.Is(first.Release(ctx), dblock.ErrLost))
	if err := second.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// expired: true
	// newer token: true
	// old release: true
}

// Guard makes a write in the caller's transaction commit only while the lock
// is really held.
func ExampleLocker_Guard() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()
	if _, err := db.SQL().ExecContext(ctx, "CREATE TABLE report (id INTEGER PRIMARY KEY, body TEXT)"); err != nil {
		panic(err)
	}

	lease, err := locker.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	if err := locker.Guard(ctx, tx, lease); err != nil {
		panic(err) // errors.Is(err, dblock.ErrNotHeld): roll back.
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO report (id, body) VALUES (1, 'ok')"); err != nil {
		panic(err)
	}
	fmt.Println("commit:", tx.Commit())
	// Output:
	// commit: <nil>
}

// A transfer locks both accounts or neither: no caller ever holds one while
// waiting for the other, so two opposite transfers cannot deadlock.
func ExampleLocker_AcquireMany() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	leases, err := locker.AcquireMany(ctx, []string{"account:7", "account:3"}, dblock.WithWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	for _, lease := range leases {
		fmt.Println("holding", lease.Name())
	}
	for _, lease := range leases {
		_ = lease.Release(ctx)
	}
	// Output:
	// holding account:3
	// holding account:7
}
