package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/faults/history"
)

// modeElection drives package election in the worker processes: an acquire
// is a Campaign bounded by the wait, a release a Resign. The fault tests
// that take every mode (TestFaultProcessDeath) check its terms as leases:
// at most one leader per term, terms increasing, none outliving its TTL.
const modeElection = "election"

// electionClient is one worker's candidate per election name and TTL.
type electionClient struct {
	db *dialect.DB

	mu    sync.Mutex
	cands map[string]*election.Election
}

func newElectionClient(db *dialect.DB) *electionClient {
	return &electionClient{db: db, cands: map[string]*election.Election{}}
}

// candidate returns the worker's candidate for name with ttl.
func (c *electionClient) candidate(name string, ttl time.Duration) (*election.Election, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := fmt.Sprint(name, "/", ttl)
	if e := c.cands[key]; e != nil {
		return e, nil
	}
	e, err := election.New(c.db, name, &election.Config{TTL: ttl, Logger: quiet})
	if err != nil {
		return nil, err
	}
	c.cands[key] = e
	return e, nil
}

func (c *electionClient) acquire(ctx context.Context, name string, ttl, wait time.Duration) (held, history.Outcome, error) {
	e, err := c.candidate(name, ttl)
	if err != nil {
		return nil, history.Unknown, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	term, err := e.Campaign(wctx, "worker")
	switch {
	case err == nil:
		return electionHeld{e: e, lockerHeld: lockerHeld{term}}, history.OK, nil
	case errors.Is(err, dblock.ErrNotAcquired) && ctx.Err() == nil:
		var h *dblock.HeldError
		if errors.As(err, &h) && h.Owner != "" {
			return nil, history.Busy, nil
		}
	}
	return nil, history.Unknown, err
}

func (c *electionClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.cands {
		_ = e.Close()
	}
}

// electionHeld is a term: trusted as its lease is, ended by Resign.
type electionHeld struct {
	lockerHeld
	e *election.Election
}

func (h electionHeld) release(ctx context.Context) (history.Outcome, error) {
	was, err := h.e.Resign(ctx)
	switch {
	case err != nil:
		return history.Unknown, err
	case was:
		return history.OK, nil
	}
	return history.NotHeld, nil
}

// electionLocker presents candidates as a dblock.Locker, for the fault tests
// written against Lockers: Acquire campaigns (with the adapter's TTL: the
// options are the test's, and carry the same), Release resigns.
type electionLocker struct {
	c   *electionClient
	ttl time.Duration
}

func newElectionLocker(db *dialect.DB, ttl time.Duration) dblock.Locker {
	return electionLocker{c: newElectionClient(db), ttl: ttl}
}

func (l electionLocker) Acquire(ctx context.Context, name string, _ ...dblock.Option) (*dblock.Lease, error) {
	e, err := l.c.candidate(name, l.ttl)
	if err != nil {
		return nil, err
	}
	return e.Campaign(ctx, "adapter")
}

func (l electionLocker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	return l.Acquire(ctx, name, opts...)
}

func (l electionLocker) Do(ctx context.Context, name string, fn func(context.Context) error, opts ...dblock.Option) error {
	term, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	tctx, cancel := term.Context(ctx)
	defer cancel()
	return errors.Join(fn(tctx), term.Release(context.WithoutCancel(ctx)))
}

func (l electionLocker) Close() error { l.c.close(); return nil }
