package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// MariaDB's plain join of a running readers' period and the plain release
// of a joined share (SharedSQL.Join, LeaveJoined): see shared_take.go.

// joinsRead reports whether a read of name tries SharedSQL.Join first:
// where the dialect has it and the schema records readers, for a name
// whose last read here joined a running period.
func (db *DB) joinsRead(name string) bool {
	return db.Dialect.Shared().Join != "" && db.readRecords.Load() && db.joined.Within(name, freeFor)
}

// noteJoined records a read that joined a running period where
// SharedSQL.Join is in use: the next read of the name tries it first.
func (db *DB) noteJoined(name string, res ShareResult) {
	if res.Joined && db.Dialect.Shared().Join != "" {
		db.joined.Mark(name)
	}
}

// joinRead runs SharedSQL.Join once: a joined share, or nothing joined
// (the period too short or gone, a reader recorded in the row, a writer
// waiting, the row locked past the statement's wait: AcquireShare then
// decides, and the name is forgotten). Only errors that are not a busy row
// end the read.
func (db *DB) joinRead(ctx context.Context, p ShareParams) (ShareResult, bool, error) {
	var token, grantedUs int64
	ttlUs := p.TTL.Microseconds()
	err := db.queryRow(ctx, db, db.Dialect.Shared().Join,
		[]any{p.Owner, ttlUs, nullString(p.Metadata), p.Name, ttlUs / 2}, &token, &grantedUs)
	if err != nil {
		db.joined.Forget(p.Name)
		if errors.Is(err, sql.ErrNoRows) {
			return ShareResult{}, false, nil
		}
		return ShareResult{}, false, notBusy(db.Classify(err))
	}
	db.joined.Mark(p.Name)
	res := ShareResult{Acquired: true, Token: dblock.Token(token)}
	res.grant(grantedUs, p.TTL)
	return res, true, nil
}

// leaveJoined runs SharedSQL.LeaveJoined once where the dialect has it:
// true when it released the share; false, with no error, when it did
// nothing (the share re-entered, no other reader's share to lock, a row
// locked by another transaction): ReleaseJoinedShare goes on.
func (db *DB) leaveJoined(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	q := db.Dialect.Shared().LeaveJoined
	if q == "" {
		return false, nil
	}
	tok := int64(token)
	left, err := db.execOne(ctx, db, q, name, owner, tok, name, owner, tok, name, tok, name, owner, tok, name, tok)
	return left, notBusy(err)
}
