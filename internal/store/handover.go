package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// A fair lease's release can hand its name to the releasing Locker's next
// waiter in the same statement (QueueSQL.HandOver: PostgreSQL's statement,
// MariaDB's procedure of MySQL migration 00028): the waiter
// is woken with its lease instead of a release to take it after, one
// durable commit on the hand-off's path instead of the release's and the
// take's.

// HandsOver reports whether a release can hand the name to a waiter here.
func (db *DB) HandsOver() bool { return db.Dialect.Queue().HandOver != "" }

// HandOff is what HandOver did.
type HandOff struct {
	// Released: the lease (name, owner, token) was held, and its entry
	// ended, by the hand-off or by a release.
	Released bool
	// Handed: waiter's row is gone and the name is its lease, with Token
	// and Reentry (1).
	Handed  bool
	Token   dblock.Token
	Reentry int
	// Kept (HandLease, released only): the owner of another owner's live
	// reservation of the freed name, "" when none.
	Kept string
}

// HandOver releases the lease (name, owner, token) and hands the name to
// waiter id, whose acquisition p asks for, when that waiter is live and
// first in the queue and the release frees the name; otherwise it only
// releases (see QueueSQL.HandOver). Where the database cannot hand over
// (HandsOver false, or MariaDB's procedure refused) it only releases.
func (db *DB) HandOver(ctx context.Context, name, owner string, token dblock.Token, p AcquireParams, id int64) (HandOff, error) {
	query := db.Dialect.Queue().HandOver
	if query == "" || db.noHandOver.Load() {
		released, err := db.ReleaseLease(ctx, nil, name, owner, token)
		return HandOff{Released: released}, err
	}
	h, _, err := db.handOff(ctx, name, query,
		[]any{name, owner, int64(token), id, p.Owner, ttlArg(p.TTL), modeArg(p.Mode), nullString(p.Metadata)})
	if ProcedureRefused(err) {
		// A schema or grants from before MariaDB's procedure: the call
		// did nothing; from now on the release alone.
		db.noHandOver.Store(true)
		released, err := db.ReleaseLease(ctx, nil, name, owner, token)
		return HandOff{Released: released}, err
	}
	return h, db.Classify(err)
}

// handOff runs a hand-off's statement (query, args), whose row is (hand,
// version, reentry, and a fourth text column, returned): what it did. No
// row: the lease was not held. The error is the driver's, unclassified.
func (db *DB) handOff(ctx context.Context, name, query string, args []any) (HandOff, string, error) {
	var (
		h       HandOff
		version int64
		fourth  string
	)
	err := db.queryRow(ctx, db, query, args, &h.Handed, &version, &h.Reentry, &fourth)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return HandOff{}, "", nil
	case err != nil:
		return HandOff{}, "", err
	}
	h.Released = true
	if h.Handed {
		h.Token = dblock.Token(version)
	} else {
		db.noteReleased(name)
	}
	return h, fourth, nil
}
