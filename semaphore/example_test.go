package semaphore_test

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/semaphore"
)

// At most 5 calls at once with one API key.
func Example() {
	db, cleanup := exampledb.Open("semaphore.db")
	defer cleanup()
	calls := 0
	if err := limited(context.Background(), db, func(context.Context) error { calls++; return nil }); err != nil {
		panic(err)
	}
	fmt.Println("calls:", calls)
	// Output: calls: 1
}

// limited is the README's example.
func limited(ctx context.Context, db *dialect.DB, call func(context.Context) error) error {
	sem, err := semaphore.New(db, nil)
	if err != nil {
		return err
	}
	defer sem.Close()
	err = sem.Do(ctx, "api-key:42", 5, 1, func(ctx context.Context) error { return call(ctx) }) // limit 5, 1 permit
	return err
}

// The package doc's example.
func ExampleLocker_Do() {
	db, cleanup := exampledb.Open("semaphore-doc.db")
	defer cleanup()
	ctx := context.Background()
	call := func(context.Context) error { fmt.Println("calling"); return nil }
	s, _ := semaphore.New(db, nil)
	err := s.Do(ctx, "api-key:42", 5, 1, func(ctx context.Context) error { return call(ctx) })
	fmt.Println(err)
	_ = s.Close()
	// Output:
	// calling
	// <nil>
}

// Two permits of three out: a request for two more waits (here: is refused).
func ExampleLocker_TryAcquire() {
	db, cleanup := exampledb.Open("semaphore-try.db")
	defer cleanup()
	ctx := context.Background()
	s, _ := semaphore.New(db, nil)
	defer s.Close()
	a, _ := s.TryAcquire(ctx, "pool", 3, 2)
	_, err := s.TryAcquire(ctx, "pool", 3, 2)
	fmt.Println(err)
	st, _ := s.State(ctx, "pool")
	fmt.Printf("%d of %d out\n", st.Used, st.Limit)
	_ = a.Release(ctx)
	// Output:
	// semaphore: acquire "pool": dblock: "pool" not acquired: held by another owner: 2 of 3 permits out, 2 asked
	// 2 of 3 out
}
