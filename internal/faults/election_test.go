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

// electionHolder presents candidates as a lease holder for the tests over
// leaseModes: Acquire campaigns (with the holder's TTL: the tests' options
// carry the same, leaseModeTTL), Close resigns.
type electionHolder struct {
	c   *electionClient
	ttl time.Duration
}

func newElectionHolder(db *dialect.DB, ttl time.Duration) leaseHolder {
	return electionHolder{c: newElectionClient(db), ttl: ttl}
}

func (h electionHolder) Acquire(ctx context.Context, name string, _ ...dblock.Option) (*dblock.Lease, error) {
	e, err := h.c.candidate(name, h.ttl)
	if err != nil {
		return nil, err
	}
	return e.Campaign(ctx, "holder")
}

func (h electionHolder) Close() error { h.c.close(); return nil }
