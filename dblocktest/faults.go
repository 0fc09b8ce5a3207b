package dblocktest

import (
	"errors"
	"time"

	"github.com/dblock-go/dblock"
)

// Expire makes name's lease run out now: its holder's leases end lost with
// dblock.ErrExpired and the name is free. It reports whether name was held.
func (db *Database) Expire(name string) bool { return db.endNow(name, dblock.ErrExpired) }

// ForceRelease frees name as an administrator would: its holder's leases
// end lost with dblock.ErrForceReleased. It reports whether name was held.
func (db *Database) ForceRelease(name string) bool { return db.endNow(name, dblock.ErrForceReleased) }

// DropConnection ends name's hold as a lost connection ends a transaction:
// its holder's leases end lost with dblock.ErrConnLost and the name is
// free. It reports whether name was held.
func (db *Database) DropConnection(name string) bool { return db.endNow(name, dblock.ErrConnLost) }

func (db *Database) endNow(name string, reason error) bool {
	r := db.current(name)
	if r == nil {
		return false
	}
	db.end(name, r, reason)
	return true
}

// TakeOver gives name to owner with a new token, as another process would
// take it after the lease ran out: the old holder's leases end lost with
// dblock.ErrTakenOver. The new hold has no lease here (no Locker holds
// it); it ends by Expire, ForceRelease or the clock (its TTL is
// dblock.TTLDefault, not renewed). It returns the new token.
func (db *Database) TakeOver(name, owner string) dblock.Token {
	if r := db.current(name); r != nil {
		db.end(name, r, dblock.ErrTakenOver)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.clock.Now()
	db.tokens[name]++
	db.names[name] = &record{owner: owner, token: db.tokens[name], mode: dblock.ModeOptimistic,
		ttl: dblock.TTLDefault, acquired: now, expires: now.Add(dblock.TTLDefault), started: time.Now()}
	return db.tokens[name]
}

// ReleaseAs runs a release of name for (owner, token), as anyone holding
// those values could: it frees name when they are its holder's, ending the
// holder's leases as lost with dblock.ErrForceReleased, and reports
// whether it did.
func (db *Database) ReleaseAs(name, owner string, token dblock.Token) bool {
	r := db.current(name)
	if r == nil || r.owner != owner || r.token != token {
		return false
	}
	db.end(name, r, dblock.ErrForceReleased)
	return true
}

// StopRenewing makes every renewal of name's lease fail from now on, as for
// a holder cut off from its database: the lease then runs out when the
// Clock passes its expiry (Holder.ExpiresAt), lost with dblock.ErrExpired.
// It reports whether name was held.
func (db *Database) StopRenewing(name string) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	r, ok := db.names[name]
	if ok {
		r.renewing = false
	}
	return ok
}

// FailAcquires makes the next len(errs) acquisitions (Acquire, TryAcquire,
// Do) of any Locker on db fail with errs in order, before they look at the
// name; a nil error stands for dblock.ErrUnavailable, and an error that
// wraps no dblock sentinel is joined with ErrUnavailable.
func (db *Database) FailAcquires(errs ...error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, err := range errs {
		switch {
		case err == nil:
			err = dblock.ErrUnavailable
		case !wrapsSentinel(err):
			err = errors.Join(dblock.ErrUnavailable, err)
		}
		db.failing = append(db.failing, err)
	}
}

func wrapsSentinel(err error) bool {
	for _, s := range []error{dblock.ErrUnavailable, dblock.ErrNotAcquired, dblock.ErrClosed,
		dblock.ErrInvalidOption, dblock.ErrSchemaMissing, dblock.ErrDeadlock, dblock.ErrSerialization} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
