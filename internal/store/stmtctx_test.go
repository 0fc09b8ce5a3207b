package store_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

type ctxKey struct{}

// TestStatementContextWindow: statements whose parent context can never be
// cancelled share a deadline while they begin within a tenth of their bound
// (one timer, not one each), each bounded by between nine tenths of the
// bound and the bound, each with its own parent's values, contexts derived
// from them registering with the window's rather than starting a goroutine
// each (database/sql derives one per query); the shared
// context ends at its deadline with context.DeadlineExceeded, and a
// native path reads the parent from it (DeadlineOnly). Statements of
// another bound get windows of their own; a statement that begins later
// gets a new window; a parent that can be cancelled gets a context of its
// own, which its cancel function ends.
func TestStatementContextWindow(t *testing.T) {
	t.Parallel()
	db := new(store.DB)
	const d = 2 * time.Second
	pa := context.WithValue(context.Background(), ctxKey{}, "a")
	pb := context.WithValue(context.Background(), ctxKey{}, "b")
	begin := time.Now()
	a, cancelA := db.StatementContext(pa, d)
	defer cancelA()
	other, cancelOther := db.StatementContext(pa, time.Minute)
	defer cancelOther()
	b, cancelB := db.StatementContext(pb, d)
	defer cancelB()
	made := time.Now()
	// Two statements begun within a tenth of the bound share its window;
	// a machine that stalled the test longer between them may not.
	if shared := a.Done() == b.Done(); !shared && made.Sub(begin) < d/10 || a.Done() == other.Done() {
		t.Fatalf("windows: same bound shared %v (made %v apart), other bound shared %v; want true, false",
			shared, made.Sub(begin), a.Done() == other.Done())
	}
	if got := [2]any{a.Value(ctxKey{}), b.Value(ctxKey{})}; got != [2]any{"a", "b"} {
		t.Fatalf("values %v, want each parent's [a b]", got)
	}
	dl, ok := b.Deadline()
	if !ok || dl.Before(begin.Add(d-d/10)) || dl.After(made.Add(d)) {
		t.Fatalf("deadline %v after the first statement began, %v after the last (set %v), want at least %v and at most %v",
			dl.Sub(begin), dl.Sub(made), ok, d-d/10, d)
	}
	deadline, bare, ok := store.DeadlineOnly(b)
	if !ok || !deadline.Equal(dl) || bare != pb || bare.Done() != nil {
		t.Fatalf("DeadlineOnly: %v %v %v, want the deadline and the never-cancelled parent", deadline, bare, ok)
	}
	if n := derivedGoroutines(b, 1000); n > 500 {
		t.Fatalf("1,000 contexts derived from a statement's started %d goroutines, want none", n)
	}
	time.Sleep(d / 5)
	later, cancelLater := db.StatementContext(pa, d)
	defer cancelLater()
	if ldl, _ := later.Deadline(); later.Done() == a.Done() || time.Until(ldl) < d-d/10 {
		t.Fatalf("a statement begun %v later: shared the window %v, %v left; want a new window with at least %v", d/5, later.Done() == a.Done(), time.Until(ldl), d-d/10)
	}
	for _, c := range []context.Context{a, b} {
		select {
		case <-c.Done():
		case <-time.After(10 * d):
			t.Fatalf("the window did not end within %v", 10*d)
		}
	}
	if ended := time.Since(begin); ended < d-d/10 || !errors.Is(a.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(b), context.DeadlineExceeded) {
		t.Fatalf("the window ended after %v with %v (cause %v), want after at least %v with context.DeadlineExceeded", ended, a.Err(), context.Cause(b), d-d/10)
	}

	parent, stop := context.WithCancel(context.Background())
	defer stop()
	own, cancelOwn := db.StatementContext(parent, time.Minute)
	if _, _, ok := store.DeadlineOnly(own); ok || own.Done() == other.Done() {
		t.Fatalf("a cancellable parent's statement: deadline-only %v, shared a window %v; want neither", ok, own.Done() == other.Done())
	}
	cancelOwn()
	if !errors.Is(own.Err(), context.Canceled) {
		t.Fatalf("a cancellable parent's statement after its cancel: %v, want context.Canceled", own.Err())
	}
}

// derivedGoroutines derives n contexts from parent and returns how many
// goroutines more run while they are live (context starts one per child
// of a parent it cannot register with).
func derivedGoroutines(parent context.Context, n int) int {
	before := runtime.NumGoroutine()
	cancels := make([]context.CancelFunc, n)
	for i := range cancels {
		_, cancels[i] = context.WithCancel(parent)
	}
	during := runtime.NumGoroutine()
	for _, cancel := range cancels {
		cancel()
	}
	return during - before
}
