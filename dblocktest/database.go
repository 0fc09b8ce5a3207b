package dblocktest

import (
	"sync"
	"time"

	"github.com/dblock-go/dblock"
)

// Database is the in-memory store the Lockers on it share, as processes
// share a database: the names and their holders, the tokens, the clock
// (Clock), and the faults a test injects. It is safe for concurrent use.
type Database struct {
	clock *Clock

	mu      sync.Mutex
	names   map[string]*record
	tokens  map[string]dblock.Token
	changed map[string]chan struct{} // closed (and forgotten) when the name may have freed
	failing []error                  // errors for the next acquisitions, in order
}

// NewDatabase returns an empty database on clock (nil: a new clock reading
// 2026-01-01 UTC).
func NewDatabase(clock *Clock) *Database {
	if clock == nil {
		clock = NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	db := &Database{clock: clock, names: map[string]*record{}, tokens: map[string]dblock.Token{},
		changed: map[string]chan struct{}{}}
	clock.attach(db)
	return db
}

// Clock returns the database's clock.
func (db *Database) Clock() *Clock { return db.clock }

// Holder is a name's holder as the lock row would show it.
type Holder struct {
	Name    string
	Owner   string
	Token   dblock.Token
	Mode    string
	Reentry int
	// AcquiredAt and ExpiresAt are by the database's Clock.
	AcquiredAt, ExpiresAt time.Time
}

// Holders lists who holds what.
func (db *Database) Holders() []Holder {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]Holder, 0, len(db.names))
	for name, r := range db.names {
		out = append(out, r.holder(name))
	}
	return out
}

// Holder returns name's holder, and false when name is free.
func (db *Database) Holder(name string) (Holder, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	r, ok := db.names[name]
	if !ok {
		return Holder{}, false
	}
	return r.holder(name), true
}

func (r *record) holder(name string) Holder {
	return Holder{Name: name, Owner: r.owner, Token: r.token, Mode: r.mode, Reentry: len(r.handles),
		AcquiredAt: r.acquired, ExpiresAt: r.expires}
}

// current returns name's record, or nil.
func (db *Database) current(name string) *record {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.names[name]
}

// freeLocked empties name and wakes its waiters; db.mu is held.
func (db *Database) freeLocked(name string) {
	delete(db.names, name)
	if ch, ok := db.changed[name]; ok {
		close(ch)
		delete(db.changed, name)
	}
}

// changedLocked is the channel closed when name may have freed; db.mu is held.
func (db *Database) changedLocked(name string) chan struct{} {
	ch, ok := db.changed[name]
	if !ok {
		ch = make(chan struct{})
		db.changed[name] = ch
	}
	return ch
}

// tick acts at the clock's new time: a live holder's lease is renewed
// (never past its cap); a lease whose renewals stopped, or whose cap came,
// runs out.
func (db *Database) tick(now time.Time) {
	type ending struct {
		name string
		r    *record
	}
	var out []ending
	db.mu.Lock()
	for name, r := range db.names {
		if r.renewing {
			r.expires = now.Add(r.ttl)
			for _, h := range r.handles {
				h.ctl.SetDeadline(time.Now().Add(r.ttl)) // as a renewal moves the local deadline
			}
		}
		if !r.capAt.IsZero() && r.expires.After(r.capAt) {
			r.expires = r.capAt
		}
		if !now.Before(r.expires) {
			out = append(out, ending{name, r})
		}
	}
	db.mu.Unlock()
	for _, e := range out {
		db.end(e.name, e.r, dblock.ErrExpired)
	}
}
