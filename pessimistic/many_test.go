package pessimistic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

func TestAcquireMany(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		other := newLocker(t, iso.Open(t), nil)
		a, b, c := randName(t), randName(t), randName(t)
		lease, err := l.AcquireMany(ctx, []string{c, a, b, a}, dblock.WithToken())
		if err != nil {
			t.Fatalf("acquire many: %v", err)
		}
		want := []string{a, b, c}
		slices.Sort(want)
		if got := lease.Names(); !slices.Equal(got, want) {
			t.Fatalf("names %v, want %v", got, want)
		}
		for _, n := range want {
			if lease.TokenOf(n) <= 0 {
				t.Errorf("token of %q: %d", n, lease.TokenOf(n))
			}
		}
		if iso.Kind != store.SQLite {
			for _, n := range want {
				if _, err := other.TryAcquire(ctx, n); !errors.Is(err, dblock.ErrNotAcquired) {
					t.Fatalf("try %q while held: %v, want ErrNotAcquired", n, err)
				}
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		again, err := other.TryAcquireMany(ctx, want)
		if err != nil {
			t.Fatalf("try many after release: %v", err)
		}
		_ = again.Release(ctx)
	})
}

// TestAcquireManyOppositeOrders: callers naming the same names in opposite
// orders never deadlock, because the rows are locked in name order.
func TestAcquireManyOppositeOrders(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		a, b := randName(t), randName(t)
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := 0; i < 4; i++ {
			l := newLocker(t, iso.Open(t), nil)
			names := []string{a, b}
			if i%2 == 1 {
				names = []string{b, a}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					lease, err := l.AcquireMany(ctx, names)
					if err != nil {
						errs <- err
						return
					}
					if err := lease.Release(ctx); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("acquire many: %v", err)
		}
	})
}

func TestLockRows(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		if _, err := iso.Store().ExecContext(ctx, "CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(16))"); err != nil {
			t.Fatalf("create: %v", err)
		}
		for i := 1; i <= 5; i++ {
			if _, err := iso.Store().ExecContext(ctx, fmt.Sprintf("INSERT INTO jobs (id, state) VALUES (%d, 'new')", i)); err != nil {
				t.Fatalf("insert: %v", err)
			}
		}
		tx1, err := iso.Store().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx1.Rollback() }()
		keys, err := l.LockRows(ctx, tx1, pessimistic.LockRowsParams{Table: "jobs", KeyColumn: "id", Keys: []any{3, 1, 2, 9}})
		if err != nil {
			t.Fatalf("lock rows: %v", err)
		}
		if fmt.Sprint(keys) != "[1 2 3]" {
			t.Fatalf("locked %v, want [1 2 3]", keys)
		}
		tx2, err := iso.Store().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx2.Rollback() }()
		keys, err = l.LockRows(ctx, tx2, pessimistic.LockRowsParams{Table: "jobs", KeyColumn: "id", Keys: []any{1, 2, 3, 4, 5}, SkipLocked: true})
		if err != nil {
			t.Fatalf("skip locked: %v", err)
		}
		if fmt.Sprint(keys) != "[4 5]" {
			t.Fatalf("skip locked got %v, want [4 5]", keys)
		}
		if _, err := l.LockRows(ctx, tx2, pessimistic.LockRowsParams{Table: "jobs", KeyColumn: "id", Keys: []any{2}, NoWait: true}); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("no wait on a locked row: %v, want ErrNotAcquired", err)
		}
		for _, bad := range []pessimistic.LockRowsParams{
			{Table: "jobs; DROP TABLE jobs", KeyColumn: "id", Keys: []any{1}},
			{Table: "jobs", KeyColumn: "id`", Keys: []any{1}},
			{Table: "jobs", KeyColumn: "a.b", Keys: []any{1}},
			{Table: "jobs", KeyColumn: "id", Keys: []any{1}, NoWait: true, SkipLocked: true},
		} {
			if _, err := l.LockRows(context.Background(), tx1, bad); !errors.Is(err, dblock.ErrInvalidOption) {
				t.Errorf("%+v: %v, want ErrInvalidOption", bad, err)
			}
		}
	})
}
