package pessimistic_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestTokenAfterDeadHolder: a fencing token handed to a holder that dies
// before its commit (its transaction, and with it the row's version, rolled
// back) is never followed by a smaller one. W asks for the name first (on
// SQLite its token is issued then, before it waits for the lock), P asks
// later, gets the lock first with its token and dies holding it; W then gets
// the lock and must get a token above P's. A rollback leaves the database
// as the death of P's process or connection does.
func TestTokenAfterDeadHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		for _, many := range []bool{false, true} {
			t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
				tokenAfterDeadHolder(t, iso, many)
			})
		}
	})
}

func tokenAfterDeadHolder(t *testing.T, iso *dbtest.Isolated, many bool) {
	ctx := testCtx(t)
	name := randName(t)
	names := []string{name}
	if many {
		names = append(names, name+":b")
	}
	var (
		issued, proceed = make(chan struct{}), make(chan struct{})
		issuedOnce      sync.Once
	)
	// The rows exist (a row created meanwhile would start above W's token).
	p := newLocker(t, iso.DB, nil)
	first, err := p.AcquireMany(ctx, names, dblock.WithToken())
	if err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("first release: %v", err)
	}

	w := newLocker(t, iso.DB, nil)
	pessimistic.SetTestHooks(w, pessimistic.TestHooks{
		BeforeBegin: func([]string) {
			issuedOnce.Do(func() {
				close(issued)
				<-proceed
			})
		},
	})
	type result struct {
		lease *pessimistic.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		var r result
		if many {
			r.lease, r.err = w.AcquireMany(ctx, names, dblock.WithToken())
		} else {
			r.lease, r.err = w.Acquire(ctx, name, dblock.WithToken())
		}
		got <- r
	}()
	select {
	case <-issued:
	case r := <-got:
		t.Fatalf("W returned before its attempt began: %v", r.err)
	}

	pl, err := p.Acquire(ctx, name, dblock.WithToken())
	if err != nil {
		close(proceed)
		t.Fatalf("P acquire: %v", err)
	}
	pToken := pl.Token()
	// W goes on to wait for the lock (or takes it after the rollback,
	// whichever comes first: the outcome must be the same).
	close(proceed)
	if err := pl.Rollback(ctx); err != nil {
		t.Fatalf("P dies (rollback): %v", err)
	}

	r := <-got
	if r.err != nil {
		t.Fatalf("W acquire: %v", r.err)
	}
	wToken := r.lease.TokenOf(name)
	if wToken <= pToken {
		t.Fatalf("W holds %q with token %d after P was handed %d: the token went backwards", name, wToken, pToken)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("W release: %v", err)
	}
	next, err := p.Acquire(ctx, name, dblock.WithToken())
	if err != nil {
		t.Fatalf("acquire after W: %v", err)
	}
	if next.Token() <= wToken {
		t.Fatalf("token %d after W's %d", next.Token(), wToken)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}
