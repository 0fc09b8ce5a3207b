package dblocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
)

// record is a name's hold: what the lock row would say, and the handles
// given out for it (one per acquisition, re-entries included).
type record struct {
	owner    string
	token    dblock.Token
	mode     string
	ttl      time.Duration
	acquired time.Time // by the Clock
	expires  time.Time // by the Clock; moved by renewals
	capAt    time.Time // acquired + max hold; zero without a cap
	renewing bool      // false after StopRenewing: the lease runs out at expires
	started  time.Time // local time of the first acquisition, for hooks
	handles  []handle
}

// handle is one acquisition's lease, and the Locker that gave it out.
type handle struct {
	locker *Locker
	lease  *dblock.Lease
	ctl    mode.Control
}

// try takes name for l with o's owner if it can, or returns the channel
// that closes when the name may have freed.
func (db *Database) try(l *Locker, name string, o mode.Options, start time.Time) (*dblock.Lease, <-chan struct{}, error) {
	db.mu.Lock()
	select {
	case <-l.closing:
		db.mu.Unlock()
		return nil, nil, fmt.Errorf("dblocktest: acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
	default:
	}
	if len(db.failing) > 0 {
		err := db.failing[0]
		db.failing = db.failing[1:]
		db.mu.Unlock()
		return nil, nil, fmt.Errorf("dblocktest: acquire %q: %w", name, err)
	}
	r := db.names[name]
	if r != nil && r.owner != o.Owner {
		ch := db.changedLocked(name)
		db.mu.Unlock()
		return nil, ch, nil
	}
	if r == nil {
		r = db.newRecordLocked(name, o)
	}
	h := handle{locker: l}
	h.lease, h.ctl = mode.NewLease(mode.LeaseParams{
		Name: name, Owner: o.Owner, Mode: r.mode, Token: int64(r.token), Reentry: len(r.handles) + 1,
		Deadline: time.Now().Add(o.FirstTTL()),
		Release:  func(context.Context) error { return db.release(name, r, h.lease) },
	})
	r.handles = append(r.handles, h)
	db.mu.Unlock()
	l.events.Acquired(name, o.Owner, r.token, time.Since(start))
	return h.lease, nil, nil
}

// newRecordLocked gives name to o's owner with the next token; db.mu is held.
func (db *Database) newRecordLocked(name string, o mode.Options) *record {
	now := db.clock.Now()
	db.tokens[name]++
	r := &record{owner: o.Owner, token: db.tokens[name], mode: dblock.ModeOptimistic, ttl: o.TTL,
		acquired: now, expires: now.Add(o.FirstTTL()), renewing: true, started: time.Now()}
	if o.MaxHold > 0 {
		r.capAt = now.Add(o.MaxHold)
	}
	db.names[name] = r
	return r
}

// release ends one handle of r; the last one frees the name.
func (db *Database) release(name string, r *record, lease *dblock.Lease) error {
	db.mu.Lock()
	if db.names[name] != r {
		db.mu.Unlock()
		return fmt.Errorf("dblocktest: release %q: %w", name, dblock.ErrNotHeld)
	}
	var events *Locker
	for i, h := range r.handles {
		if h.lease == lease {
			events = h.locker
			r.handles = append(r.handles[:i], r.handles[i+1:]...)
			break
		}
	}
	last := len(r.handles) == 0
	if last {
		db.freeLocked(name)
	}
	db.mu.Unlock()
	if last && events != nil {
		events.events.Released(name, r.owner, r.token, time.Since(r.started))
	}
	return nil
}

// end frees name, if r still holds it, and ends every handle of r as lost
// with reason.
func (db *Database) end(name string, r *record, reason error) {
	db.mu.Lock()
	if db.names[name] != r {
		db.mu.Unlock()
		return
	}
	db.freeLocked(name)
	handles := r.handles
	r.handles = nil
	db.mu.Unlock()
	for _, h := range handles {
		if h.ctl.Lose(reason) {
			h.locker.events.Lost(name, r.owner, r.token, h.lease.Err(), time.Since(r.started))
		}
	}
}

// closeLocker ends the handles l gave out (lost, with dblock.ErrClosed) and
// frees the names no other Locker's handle holds.
func (db *Database) closeLocker(l *Locker) {
	var ended []handle
	db.mu.Lock()
	for name, r := range db.names {
		before := len(ended)
		kept := r.handles[:0]
		for _, h := range r.handles {
			if h.locker == l {
				ended = append(ended, h)
			} else {
				kept = append(kept, h)
			}
		}
		r.handles = kept
		if len(kept) == 0 && len(ended) > before {
			db.freeLocked(name)
		}
	}
	db.mu.Unlock()
	for _, h := range ended {
		h.ctl.LoseIfHeld(dblock.ErrClosed)
	}
}
