package dblockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/election"
)

// ErrNotLeader is IsLeader's answer on a scheduler that is not the leader.
var ErrNotLeader = errors.New("dblockgocron: not the leader")

// Elector is a gocron.Elector on an election: it campaigns in the
// background from NewElector until Close, and IsLeader answers nil while
// its candidate holds the term by its lease.
type Elector struct {
	e      *election.Election
	value  string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	term *dblock.Lease
}

// NewElector starts campaigning on e with value (shown as the leader's
// value, e.g. the host name). Close stops, resigning a term held.
func NewElector(e *election.Election, value string) *Elector {
	ctx, cancel := context.WithCancel(context.Background())
	el := &Elector{e: e, value: value, cancel: cancel, done: make(chan struct{})}
	go el.campaign(ctx)
	return el
}

// campaign wins terms, one after another, until ctx ends.
func (el *Elector) campaign(ctx context.Context) {
	defer close(el.done)
	for ctx.Err() == nil {
		term, err := el.e.Campaign(ctx, el.value)
		if err != nil {
			// ctx ended, or the database failed: try again a moment later.
			select {
			case <-ctx.Done():
			case <-time.After(retryPause):
			}
			continue
		}
		el.mu.Lock()
		el.term = term
		el.mu.Unlock()
		select {
		case <-term.Done():
		case <-ctx.Done():
		}
		el.mu.Lock()
		el.term = nil
		el.mu.Unlock()
	}
}

// IsLeader returns nil while this candidate holds the term, ErrNotLeader
// otherwise.
func (el *Elector) IsLeader(context.Context) error {
	el.mu.Lock()
	term := el.term
	el.mu.Unlock()
	if term == nil || term.Err() != nil {
		return fmt.Errorf("%w of %q", ErrNotLeader, el.e.Name())
	}
	return nil
}

// Close stops campaigning and resigns a term held, so that another
// scheduler takes over at once.
func (el *Elector) Close() error {
	el.cancel()
	<-el.done
	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	_, err := el.e.Resign(ctx)
	return err
}

// resignTimeout bounds Close's resignation; retryPause separates failed
// campaigns.
const (
	resignTimeout = 10 * time.Second
	retryPause    = 250 * time.Millisecond
)
