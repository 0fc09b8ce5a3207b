package fairqueue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/exampledb"
)

// Waiters take the name in the order they arrived.
func ExampleLocker_Acquire() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := fairqueue.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	first, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		panic(err)
	}
	done := make(chan string)
	for _, who := range []string{"alice", "bob", "carol"} {
		go func() {
			lease, err := locker.Acquire(ctx, "invoice:42", dblock.WithOwner(who))
			if err != nil {
				panic(err)
			}
			done <- who
			_ = lease.Release(ctx)
		}()
		// Wait until this waiter is queued before the next one arrives.
		for {
			if _, queued, _ := locker.Position(ctx, "invoice:42", who); queued {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	queue, _ := locker.Queue(ctx, "invoice:42")
	for _, w := range queue {
		fmt.Println(w.Position, w.Owner)
	}
	_ = first.Release(ctx)
	for range 3 {
		fmt.Println("acquired by", <-done)
	}
	// Output:
	// 1 alice
	// 2 bob
	// 3 carol
	// acquired by alice
	// acquired by bob
	// acquired by carol
}

// TryAcquire does not jump the queue: it fails while anyone waits.
func ExampleLocker_TryAcquire() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := fairqueue.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("token:", lease.Token())
	_, err = locker.TryAcquire(ctx, "nightly-report")
	fmt.Println("second try acquired:", !errors.Is(err, dblock.ErrNotAcquired))
	_ = lease.Release(ctx)
	// Output:
	// token: 1
	// second try acquired: false
}

// A waiter watches its own place in the queue, whatever its owner.
func ExampleWithPositionFunc() {
	db, cleanup := exampledb.Open("locks.db")
	defer cleanup()
	locker, err := fairqueue.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	held, err := locker.Acquire(ctx, "report:daily")
	if err != nil {
		panic(err)
	}
	places := make(chan int, 1)
	done := make(chan error)
	go func() {
		wctx := fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) {
			select { // fn must not block.
			case places <- p.Position:
			default:
			}
		})
		lease, err := locker.Acquire(wctx, "report:daily")
		if err == nil {
			err = lease.Release(ctx)
		}
		done <- err
	}()
	fmt.Println("waiting at place", <-places)
	if err := held.Release(ctx); err != nil {
		panic(err)
	}
	fmt.Println("waiter done:", <-done)
	// Output:
	// waiting at place 1
	// waiter done: <nil>
}
