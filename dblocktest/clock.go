package dblocktest

import (
	"sync"
	"time"
)

// Clock is the time the in-memory Lockers run on: it moves only when the
// test calls Advance or Set, and each move ends the leases that ran out.
// It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
	dbs []*Database
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
// Database on it act as by then: leases renewed by live holders, those
// whose renewals stopped run out, caps reached.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	now, dbs := c.now, append([]*Database(nil), c.dbs...)
	c.mu.Unlock()
	for _, db := range dbs {
		db.tick(now)
	}
}

func (c *Clock) attach(db *Database) {
	c.mu.Lock()
	c.dbs = append(c.dbs, db)
	c.mu.Unlock()
}

// FollowRealTime moves the clock with real time, every step, until stop
// is called: for code under test that waits in real time (a lease's TTL
// running out while nothing calls Advance). stop waits for the last move.
func (c *Clock) FollowRealTime(step time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(step)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				c.Advance(now.Sub(last))
				last = now
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
	}
}
