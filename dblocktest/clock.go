package dblocktest

import (
	"sync"
	"time"
)

// Clock is the time the in-memory Lockers run on: it moves only when the
// test calls Advance or Set, and each move ends the leases that ran out.
// It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	lockers []*Locker
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (d < 0 is ignored) and lets every
// Locker on it act as the database would by then: leases renewed by live
// holders, those whose renewals fail run out, caps reached.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	now, lockers := c.now, append([]*Locker(nil), c.lockers...)
	c.mu.Unlock()
	for _, l := range lockers {
		l.tick(now)
	}
}

func (c *Clock) attach(l *Locker) {
	c.mu.Lock()
	c.lockers = append(c.lockers, l)
	c.mu.Unlock()
}

func (c *Clock) detach(l *Locker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.lockers {
		if x == l {
			c.lockers = append(c.lockers[:i], c.lockers[i+1:]...)
			return
		}
	}
}
