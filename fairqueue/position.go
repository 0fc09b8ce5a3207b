package fairqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// Waiter is a live waiter in a name's queue, as `dblock status` shows it.
type Waiter struct {
	// Position is 1 for the waiter that takes the name next, then 2, ...
	Position int
	Name     string
	Owner    string
	// ID is the waiter's row id (the tie-break after CreatedAt).
	ID int64
	// CreatedAt is when the waiter joined the queue, by the database clock.
	CreatedAt time.Time
	// Waited is how long it has been queueing, by the database clock.
	Waited time.Duration
	// ExpiresAt is the waiter's heartbeat deadline.
	ExpiresAt time.Time
}

// Queue lists the live waiters of name in queue order. Dead waiters (whose
// heartbeat deadline passed) take no position and are not listed. It needs
// no Locker, so tools such as `dblock status` can call it.
func Queue(ctx context.Context, handle *dialect.DB, name string) ([]Waiter, error) {
	return queue(ctx, store.Of(handle), name)
}

// queue is Queue on the store.
func queue(ctx context.Context, db *store.DB, name string) ([]Waiter, error) {
	if err := dblock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fairqueue: queue: %w", err)
	}
	rows, err := db.ListWaiters(ctx, []string{name})
	if err != nil {
		return nil, fmt.Errorf("fairqueue: queue %q: %w", name, err)
	}
	out := make([]Waiter, 0, len(rows))
	for _, r := range rows {
		out = append(out, Waiter{
			Position: r.Position, Name: r.Name, Owner: r.Owner, ID: r.ID,
			CreatedAt: r.CreatedAt, Waited: max(r.Now.Sub(r.CreatedAt), 0), ExpiresAt: r.ExpiresAt,
		})
	}
	return out, nil
}

// Queue lists the live waiters of name in queue order (see the package
// function Queue).
func (l *Locker) Queue(ctx context.Context, name string) ([]Waiter, error) {
	return queue(ctx, l.db, name)
}

// Position reports where owner waits in name's queue: the first live waiter
// of that owner, and false when it is not queueing (it may hold the name, or
// not be waiting at all). Acquire with dblock.WithOwner to know the owner of
// a wait in progress, or observe a wait of your own with WithPositionFunc.
func (l *Locker) Position(ctx context.Context, name, owner string) (Waiter, bool, error) {
	q, err := queue(ctx, l.db, name)
	if err != nil {
		return Waiter{}, false, err
	}
	for _, w := range q {
		if w.Owner == owner {
			return w, true, nil
		}
	}
	return Waiter{}, false, nil
}

// Position is a waiter's place in its queue, as it observes it while it
// waits (WithPositionFunc).
type Position struct {
	Name  string
	Owner string // The acquisition's owner (a fresh random one by default).
	// Position is 1 for the waiter that takes the name next, then 2, ...
	Position int
	// Joined is when the waiter joined the queue, by the database clock.
	Joined time.Time
	// Waited is how long the waiter has queued, by the database clock.
	Waited time.Duration
}

type positionKey struct{}

// WithPositionFunc returns a copy of ctx that makes Acquire (and Do) called
// with it report the waiter's place in the queue to fn while it waits: once
// the waiter has joined the queue, and again each time a check finds it
// moved (as net/http/httptrace reports a request's progress). fn runs on the
// waiting goroutine and must not block. An acquisition that finds the name
// free takes it without queueing and never calls fn; one that queues again
// after losing its place reports from its new place. Other Lockers ignore it.
func WithPositionFunc(ctx context.Context, fn func(Position)) context.Context {
	return context.WithValue(ctx, positionKey{}, fn)
}

// positionFunc returns the observer set by WithPositionFunc, or nil.
func positionFunc(ctx context.Context) func(Position) {
	fn, _ := ctx.Value(positionKey{}).(func(Position))
	return fn
}
