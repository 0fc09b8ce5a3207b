package fairqueue

import (
	"fmt"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// writeLock serialises a Locker's writes on SQLite, which has one writer per
// database: a one-slot channel rather than a mutex, so that a waiting call
// can stop waiting for it when its wait ends. (The lease keeper's release or
// renewal may hold it while SQLite's busy timeout runs behind a pessimistic
// holder.) Nil elsewhere: writes are not serialised.
type writeLock chan struct{}

func (w writeLock) Lock()   { w <- struct{}{} }
func (w writeLock) Unlock() { <-w }

// locker is w as a sync.Locker for the lease keeper, or nil.
func (w writeLock) locker() sync.Locker {
	if w == nil {
		return nil
	}
	return w
}

// tryWriteWait bounds how long a call that does not wait waits for the
// write lock: the bound a lease acquisition waits for SQLite's write lock.
const tryWriteWait = 100 * time.Millisecond

// lockWrites takes the Locker's write lock for the attempt, giving up when
// its wait ends or the Locker closes (the error then says so, as stopped
// does), or, for a call that does not wait, after tryWriteWait (the error
// then wraps dblock.ErrNotAcquired).
func (a *attempt) lockWrites(wait bool) (unlock func(), err error) {
	w := a.l.writeMu
	if w == nil {
		return func() {}, nil
	}
	var timeout <-chan time.Time
	if !wait {
		t := time.NewTimer(tryWriteWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case w <- struct{}{}:
		return w.Unlock, nil
	case <-a.ctx.Done():
	case <-a.l.life.Closing:
	case <-timeout:
		return nil, a.errorf("%w: the database is write-locked by another transaction", dblock.ErrNotAcquired)
	}
	if err := a.stopped(store.Holder{}); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("fairqueue: acquire %q: %w: wait ended", a.name, dblock.ErrNotAcquired)
}
