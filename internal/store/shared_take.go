package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// The cheaper reads (MariaDB): of a free name (SharedSQL.TakeFree, with
// the release of the reader it records, SharedSQL.ReleaseRecorded; here),
// and of a name whose readers' period runs (SharedSQL.Join, with the
// release of a joined share while another reader holds to the period's
// end, SharedSQL.LeaveJoined; shared_join.go). They are plain statements,
// where AcquireShare and ReleaseShare CALL procedures, which MariaDB runs
// at a cost of their own (a CALL and the statements in it cost more than
// one statement sent alone). As for a lease's TakeFree (takefree.go), a
// read goes first to one only where it most likely succeeds: the take for
// a name this DB freed lately, the join for a name whose last read here
// joined a period; one that does nothing costs its statement, the name is
// forgotten, and the CALL follows. Reads try them only once a CALL of
// SharedSQL.Acquire succeeded here, which proves a schema whose procedures
// know a reader recorded in the row (MySQL migration 00025).

// readPlain tries the plain take or join where they apply: a share, or
// nothing taken (took false, AcquireShare goes on), or an error.
func (db *DB) readPlain(ctx context.Context, p ShareParams) (ShareResult, bool, error) {
	switch {
	case db.takesFreeRead(p.Name):
		return db.takeFreeRead(ctx, p)
	case db.joinsRead(p.Name):
		return db.joinRead(ctx, p)
	}
	return ShareResult{}, false, nil
}

// takesFreeRead reports whether a read of name tries SharedSQL.TakeFree
// first: where the dialect has it and the schema records readers, no
// trigger seen lately (one would hide the insert id), for a name this DB
// freed lately.
func (db *DB) takesFreeRead(name string) bool {
	return db.Dialect.Shared().TakeFree != "" && db.readRecords.Load() && !db.returningAcquire() &&
		db.free.Within(name, freeFor)
}

// takeFreeRead runs SharedSQL.TakeFree once: a recorded reader's share, or
// nothing taken (the name held, reserved for another owner, its row
// locked by a transaction: AcquireShare then decides, and the name is
// forgotten). Only errors that are not a busy row end the read.
func (db *DB) takeFreeRead(ctx context.Context, p ShareParams) (ShareResult, bool, error) {
	owner := any(p.Owner)
	affected, id, err := db.execID(ctx, db.Dialect.Shared().TakeFree, nullString(p.Metadata), ttlArg(p.TTL), owner, p.Name, owner)
	switch {
	case err != nil:
		db.free.Forget(p.Name)
		return ShareResult{}, false, notBusy(db.Classify(err))
	case affected != 1:
		db.free.Forget(p.Name)
		return ShareResult{}, false, nil
	}
	// Held now: the next read of the name here (a re-entry, a second
	// reader) goes to the join or the procedure, and the release marks it
	// free again.
	db.free.Forget(p.Name)
	if id == 0 {
		return db.recordedToken(ctx, p)
	}
	return ShareResult{Acquired: true, Token: dblock.Token(id), Recorded: true}, true, nil
}

// recordedToken reads the token of a take whose insert id a trigger hid
// (the history's), and remembers the trigger: the next reads CALL the
// procedure, whose insert id a trigger leaves alone. The row cannot have
// passed to another period in between: the reader recorded in it holds
// the name until it expires (a second reader keeps the period's token).
func (db *DB) recordedToken(ctx context.Context, p ShareParams) (ShareResult, bool, error) {
	db.history.noteTrigger(true)
	var version int64
	err := db.DB.QueryRowxContext(ctx, db.Dialect.Shared().RecordedToken, p.Name).Scan(&version)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			err = errors.New("the row of a name just read was taken from its readers")
		}
		return ShareResult{}, false, db.Classify(err)
	}
	return ShareResult{Acquired: true, Token: dblock.Token(version), Recorded: true}, true, nil
}

// ReleaseRecordedShare is ReleaseShare for a share that SharedSQL.TakeFree
// recorded in the name's row (ShareResult.Recorded): one plain update
// (SharedSQL.ReleaseRecorded) while the reader is still recorded there,
// else, a second reader having moved it into dblock_shares, ReleaseShare.
func (db *DB) ReleaseRecordedShare(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	q := db.Dialect.Shared().ReleaseRecorded
	if q == "" {
		return db.ReleaseShare(ctx, name, owner, token)
	}
	var released bool
	err := db.retryRowLocked(ctx, shareEndLockedMax, func() (err error) {
		released, err = db.execOne(ctx, db, q, name, owner, int64(token))
		return err
	})
	switch {
	case errors.Is(err, errRowLocked):
		return false, releaseLocked(name, err)
	case err != nil:
		return false, err
	case !released:
		return db.ReleaseShare(ctx, name, owner, token)
	}
	db.noteShareReleased(name)
	return true, nil
}

// noteShareReleased records a read lease's release where SharedSQL.TakeFree
// is in use: the next read of the name tries it first.
func (db *DB) noteShareReleased(name string) {
	if db.Dialect.Shared().TakeFree != "" {
		db.free.Mark(name)
	}
}
