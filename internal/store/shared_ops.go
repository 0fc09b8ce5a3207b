package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// The three operations on a share, each one transaction of sharedTx: what
// they decide from the locked row and the caller's share, step by step.

// AcquireShare takes name for reading (see SharedSQL): it starts a readers'
// period on a free or expired name, joins the readers holding it (unless a
// writer waits and the owner holds no share yet), or, for the owner of an
// exclusive hold, records a read lease beside it. A name held exclusively
// by another, or by a transaction (a pessimistic holder), is refused.
func (db *DB) AcquireShare(ctx context.Context, p ShareParams) (ShareResult, error) {
	res, err := db.acquireShare(ctx, p)
	if err == nil && !res.Acquired {
		res.Holder.markReserved(p.Owner)
	}
	return res, err
}

// acquireShare is AcquireShare: a plain statement first where one most
// likely does it (MariaDB: see shared_take.go), else one call of a
// function or procedure where the database has it, else a transaction of
// sharedTx.
func (db *DB) acquireShare(ctx context.Context, p ShareParams) (ShareResult, error) {
	if res, took, err := db.readPlain(ctx, p); took || err != nil {
		return res, err
	}
	if db.Dialect.Shared().Acquire != "" {
		res, err := db.acquireShareOne(ctx, p)
		db.noteJoined(p.Name, res)
		return res, err
	}
	c := &shareAcquire{db: db, ctx: ctx, p: p}
	err := db.sharedTx(ctx, p.Name, shareLockedMax, c.run)
	if errors.Is(err, errRowLocked) {
		return ShareResult{Holder: Holder{Exists: true, Mode: dblock.ModePessimistic}}, nil
	}
	return c.res, err
}

// shareAcquire is one AcquireShare in its transaction.
type shareAcquire struct {
	db  *DB
	ctx context.Context
	p   ShareParams
	tx  *sqlx.Tx
	r   sharedRow
	s   share
	res ShareResult
}

func (c *shareAcquire) run(tx *sqlx.Tx, r sharedRow) (bool, error) {
	c.tx, c.r, c.res = tx, r, ShareResult{}
	var err error
	if c.s, err = c.db.readShare(c.ctx, tx, c.p.Name, c.p.Owner); err != nil {
		return false, err
	}
	switch {
	case r.reservedFor(c.p.Owner):
		c.res.Holder = r.holder()
		return false, nil
	case !r.live():
		return c.begin()
	case r.owner == "":
		return c.join()
	case r.owner == c.p.Owner:
		return c.downgrade()
	default:
		c.res.Holder = r.holder()
		return false, nil
	}
}

// expiry is the share's new expiry: the TTL from the database clock, or
// the share's own when later (a re-entry never shortens it).
func (c *shareAcquire) expiry(token int64) int64 {
	exp := c.r.now + c.p.TTL.Microseconds()
	if c.s.found && c.s.token == token {
		exp = max(exp, c.s.expires)
	}
	return exp
}

// put writes the owner's share of the period token: one more entry when it
// has one there already (even an expired one, whose holder's late release
// then takes back its own entry only), else a new share.
func (c *shareAcquire) put(token int64) (int64, error) {
	reentry, acquired := 1, c.r.now
	if c.s.found && c.s.token == token {
		reentry = c.s.reentry + 1
	}
	exp := c.expiry(token)
	_, err := c.tx.ExecContext(c.ctx, c.db.Dialect.Shared().PutShare,
		c.p.Name, c.p.Owner, token, reentry, acquired, exp, nullString(c.p.Metadata))
	if err != nil {
		return 0, c.db.Classify(err)
	}
	c.res = ShareResult{Acquired: true, Token: dblock.Token(token)}
	return exp, nil
}

// begin starts a readers' period on a free or expired name, with a new token.
func (c *shareAcquire) begin() (bool, error) {
	exp := c.r.now + c.p.TTL.Microseconds()
	token, err := c.db.beginPeriod(c.ctx, c.tx, c.p.Name, c.r.now, exp)
	if err != nil {
		return false, err
	}
	_, err = c.put(token)
	return err == nil, err
}

// join adds a reader to the readers holding the name, unless a writer
// waits and the owner has no live share of the period (a re-entry never
// waits for a writer that would wait for it).
func (c *shareAcquire) join() (bool, error) {
	mine := c.s.found && c.s.token == c.r.version && c.s.expires > c.r.now
	if c.r.wanted > c.r.now && !mine {
		c.res = ShareResult{Holder: c.r.holder(), WriterWaits: true}
		return false, nil
	}
	exp, err := c.put(c.r.version)
	if err != nil {
		return false, err
	}
	r := c.r
	r.expires = max(r.expires, exp)
	return true, c.db.updateRow(c.ctx, c.tx, c.p.Name, r)
}

// downgrade records a read lease of the exclusive holder itself: the row
// keeps its owner, and shared_until carries the read lease (the exclusive
// lease is kept at least as long, so nobody takes the name from under it).
func (c *shareAcquire) downgrade() (bool, error) {
	exp, err := c.put(c.r.version)
	if err != nil {
		return false, err
	}
	r := c.r
	r.sharedUntil = max(r.sharedUntil, exp)
	r.expires = max(r.expires, exp)
	return true, c.db.updateRow(c.ctx, c.tx, c.p.Name, r)
}

// beginPeriod gives the row a new token and makes it held by readers until
// exp; it returns the token.
func (db *DB) beginPeriod(ctx context.Context, tx *sqlx.Tx, name string, now, exp int64) (int64, error) {
	q := db.Dialect.Shared().Begin
	if db.Dialect.Caps().Returning {
		var token int64
		err := tx.QueryRowxContext(ctx, q, now, exp, name).Scan(&token)
		return token, db.Classify(err)
	}
	res, err := tx.ExecContext(ctx, q, now, exp, name)
	if err != nil {
		return 0, db.Classify(err)
	}
	token, err := res.LastInsertId()
	if err == nil && token == 0 {
		// A trigger on the table (MariaDB's history) hides the insert id
		// from the OK packet; the session still has it.
		err = tx.QueryRowxContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&token)
	}
	if err == nil && token == 0 {
		err = fmt.Errorf("dblock: starting the readers of %q gave no token", name)
	}
	return token, err
}

// ReleaseJoinedShare is ReleaseShare for a share that joined a running
// period (ShareResult.Joined): the same outcome, where the database has a
// release for it (SharedSQL.ReleaseJoined, MariaDB) without locking the
// name's row while another reader's share reaches the period's end. Where
// its procedure is missing (error 1305: a schema before MySQL migration
// 00023) or the account may not execute it (1370: grants written before
// it), the refused call did nothing, and this DB uses ReleaseShare from
// then on.
func (db *DB) ReleaseJoinedShare(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	if left, err := db.leaveJoined(ctx, name, owner, token); left || err != nil {
		return left, err
	}
	if q := db.Dialect.Shared().ReleaseJoined; q != "" && !db.noJoinedRelease.Load() {
		released, err := db.releaseShareOne(ctx, q, name, owner, token)
		if !ProcedureRefused(err) {
			return released, err
		}
		db.noJoinedRelease.Store(true)
	}
	return db.releaseShare(ctx, name, owner, token)
}

// ReleaseShare ends one entry of owner's share of name at token; it reports
// false when there is no such share (already released, or lost). The last
// reader's release frees the name (and announces it); an exclusive holder's
// release of its read lease clears shared_until.
func (db *DB) ReleaseShare(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	released, err := db.releaseShare(ctx, name, owner, token)
	if released {
		db.noteShareReleased(name)
	}
	return released, err
}

// releaseShare is ReleaseShare but for the note of a name released (a
// joined share leaves its name to other readers).
func (db *DB) releaseShare(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	if q := db.Dialect.Shared().Release; q != "" {
		return db.releaseShareOne(ctx, q, name, owner, token)
	}
	released := false
	err := db.sharedTx(ctx, name, shareEndLockedMax, func(tx *sqlx.Tx, r sharedRow) (bool, error) {
		released = false
		s, err := db.readShare(ctx, tx, name, owner)
		if err != nil || !s.found || s.token != int64(token) || s.reentry <= 0 {
			return false, err
		}
		if s.reentry > 1 {
			_, err = tx.ExecContext(ctx, db.Dialect.Shared().SetShare, s.reentry-1, s.expires, name, owner)
		} else {
			_, err = tx.ExecContext(ctx, db.Dialect.Shared().DropShare, name, owner)
		}
		if err != nil {
			return false, db.Classify(err)
		}
		released = true
		if s.reentry > 1 || r.version != s.token || !r.live() {
			return true, nil
		}
		return true, db.shareLeft(ctx, tx, name, owner, r)
	})
	if errors.Is(err, errRowLocked) {
		err = releaseLocked(name, err)
	}
	return released, err
}

// shareLeft updates the row after a share of its period was dropped: the
// readers left are counted (the latest expiry among them ends the period),
// and none left frees the name; an exclusive holder's read lease ends. The
// row is left as it is while the readers left keep the period's end.
func (db *DB) shareLeft(ctx context.Context, tx *sqlx.Tx, name, owner string, r sharedRow) error {
	switch r.owner {
	case "":
		var n int
		var last int64
		err := tx.QueryRowxContext(ctx, db.Dialect.Shared().LiveShares, name, r.version, r.now).Scan(&n, &last)
		if err != nil {
			return db.Classify(err)
		}
		if n == 0 {
			r = sharedRow{free: true, version: r.version}
			if err := db.updateRow(ctx, tx, name, r); err != nil {
				return err
			}
			return db.notifyShared(ctx, tx, name)
		}
		if last >= r.expires {
			return nil // The period's end stays: the row is not written.
		}
		r.expires = last
		return db.updateRow(ctx, tx, name, r)
	case owner:
		r.sharedUntil = 0
		return db.updateRow(ctx, tx, name, r)
	}
	return nil
}

// notifyShared announces name freed, where the database has notifications.
func (db *DB) notifyShared(ctx context.Context, tx *sqlx.Tx, name string) error {
	q := db.Dialect.Shared().Notify
	if q == "" {
		return nil
	}
	var ignored string
	err := tx.QueryRowxContext(ctx, q, name).Scan(&ignored)
	return db.Classify(err)
}

// RenewShare extends owner's unexpired share of name at token to ttl from
// the database clock (never shortening it), and the name's row with it; it
// reports false when the share is gone, expired, or no longer the row's.
func (db *DB) RenewShare(ctx context.Context, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	if db.Dialect.Shared().Renew != "" {
		return db.renewShareOne(ctx, name, owner, token, ttl)
	}
	renewed := false
	err := db.sharedTx(ctx, name, shareEndLockedMax, func(tx *sqlx.Tx, r sharedRow) (bool, error) {
		renewed = false
		if r.live() && r.owner == "" && r.reader == owner && r.version == int64(token) {
			// The reader recorded in the row (MariaDB): the row is its lease.
			r.expires = max(r.expires, r.now+ttl.Microseconds())
			renewed = true
			return true, db.updateRow(ctx, tx, name, r)
		}
		s, err := db.readShare(ctx, tx, name, owner)
		if err != nil || !s.found || s.token != int64(token) || s.reentry <= 0 || s.expires <= r.now {
			return false, err
		}
		if !r.live() || r.version != s.token || r.owner != "" && r.owner != owner {
			return false, nil
		}
		exp := max(s.expires, r.now+ttl.Microseconds())
		if _, err := tx.ExecContext(ctx, db.Dialect.Shared().SetShare, s.reentry, exp, name, owner); err != nil {
			return false, db.Classify(err)
		}
		r.expires = max(r.expires, exp)
		if r.owner == owner {
			r.sharedUntil = max(r.sharedUntil, exp)
		}
		renewed = true
		return true, db.updateRow(ctx, tx, name, r)
	})
	if errors.Is(err, errRowLocked) {
		err = fmt.Errorf("%w: renewal of %q: %w", dblock.ErrUnavailable, name, err)
	}
	return renewed, err
}
