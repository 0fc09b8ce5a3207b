package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// readMode is the mode of a name held by readers.
const readMode = dblock.ModeRead

// SharedSQL holds the statements of read locks (package rwlock). A name held
// by readers is its dblock_locks row with owner the empty string (an owner no caller can
// name, so every exclusive mode finds the name held and needs no change),
// mode read, expires_at the end of the readers' period (the latest of their
// leases) and a token of the period's own; each reader's lease is its row of
// dblock_shares (its token is the period's, its reentry its own count).
// On PostgreSQL (migration 00017) and MariaDB (MySQL migration 00025) a
// reader that begins a period is recorded in the row itself instead, while
// it is the only one: its owner
// in the column reader, its count in the row's reentry, its acquisition
// and metadata in the row's; a second reader moves it into dblock_shares.
// Its acquisition and release are then one update of the row each, as an
// exclusive lease's. reader means something only while owner is the empty
// string.
// An exclusive holder that takes the read lock too (a downgrade) keeps its
// row, whose shared_until carries its read lease: its last exclusive release
// hands the name to readers (LeaseSQL.Release). A waiting writer sets
// wanted_until, which refuses new readers until then.
//
// A reader's release counts the unexpired shares of the period left, with a
// read that sees every reader who committed before it locked the row: none
// left frees the name (a dead reader's share counts until it expires), and
// the latest expiry among them ends the period. The readers themselves are
// the period's rows of dblock_shares (dblock status lists them).
//
// Every statement but Want and Unwant runs in one transaction that first
// locks the name's row (LockRow), so the reads of dblock_shares that follow
// see every reader who committed before, and the decisions are made in Go
// on what was read, with the database clock LockRow returned. Parameters
// come in the order the statement text names them (MySQL's ? are
// positional); times are µs since the epoch.
type SharedSQL struct {
	// LockRow (name) locks the row and reads owner, owner IS NULL,
	// version, mode, expires_at, the clock, shared_until, wanted_until,
	// reentry, the reservation's columns and reader; it gives up on a row locked for long (PostgreSQL
	// after lockWaitMs, MariaDB after a second, MySQL 8 at once) with an error wrapping
	// dblock.ErrNotAcquired.
	LockRow string
	// ReadShare (name, owner) reads token, reentry, expires_at.
	ReadShare string
	// LiveShares (name, token, now) counts the unexpired shares of a period
	// and reads the latest expiry among them.
	LiveShares string
	// Begin (acquired_at, expires_at, name) starts a readers' period with
	// a new token: RETURNING it (PostgreSQL, SQLite) or as the insert id
	// (MySQL).
	Begin string
	// Update (owner or NULL, reentry, expires_at or NULL, shared_until or
	// NULL, name) sets the row's shared-lock columns.
	Update string
	// PutShare (name, owner, token, reentry, acquired_at, expires_at,
	// metadata) inserts or replaces a reader's share.
	PutShare string
	// SetShare (reentry, expires_at, name, owner) updates a share.
	SetShare string
	// DropShare (name, owner) deletes a share.
	DropShare string
	// Want (µs, name) marks a writer waiting for a name held by readers,
	// for µs from the database clock (autocommit).
	Want string
	// Unwant (name) clears the mark (autocommit).
	Unwant string
	// Holder (name, owner, name, owner) reads a share and its name's row,
	// without locking: token, reentry, expires_at, the clock, the row's
	// owner, owner IS NULL and version (the row's columns NULL when it has
	// none); or the row of a reader recorded in it (reader), the later
	// token first.
	Holder string
	// Notify (name) announces a name freed (PostgreSQL; empty elsewhere).
	Notify string
	// List reads the unexpired shares (and readers recorded in a name's
	// row): name, owner, token, reentry, acquired_at, expires_at. It ends with its ORDER BY, before which
	// ListShares puts a filter on names.
	List string

	// AcquireFallback, where not empty (MariaDB: a CALL of
	// dblock_acquire_share), is Acquire where Acquire's procedure
	// (dblock_acquire_read of MySQL migration 00025) is missing or may
	// not be executed: the same outcome, but a reader alone gets a share
	// rather than being recorded in the name's row.
	AcquireFallback string

	// TakeFree, where not empty (MariaDB), begins a readers' period on a
	// name's existing row in autocommit mode when the name is free (no
	// live lease, no other owner's live reservation), its reader recorded
	// in the row, as a plain conditional update: one affected row and the
	// token as insert id, or nothing done. Acquire's CALL does the same
	// and more (joins, re-entries, a missing row, a refusal's holder) in
	// a procedure, which costs MariaDB more than the statement; so it is
	// tried first for a name this DB freed lately (see shared_take.go).
	TakeFree string
	// ReleaseRecorded, where not empty (MariaDB), releases one entry of
	// the reader recorded in the name's row (name, owner, token), in
	// autocommit mode: one affected row, or none when the reader is not
	// recorded there (a second reader moved it into dblock_shares), and
	// Release then does it.
	ReleaseRecorded string
	// RecordedToken, with TakeFree, reads the token of the period a take
	// began (name), where a trigger hid the insert id.
	RecordedToken string
	// Join, where not empty (MariaDB), joins a readers' period that lasts
	// half the TTL or more, has no reader recorded in the row and no
	// waiting writer, in autocommit mode: a share of the period's token
	// (owner, TTL µs, metadata, name, TTL/2 µs), returning the token and
	// how long the share lasts (µs), or no row. Acquire's CALL does the
	// same among its other ways; Join is tried first for a name whose
	// last read here joined a period (see shared_take.go).
	Join string
	// LeaveJoined, where not empty (MariaDB), releases a joined share
	// with one entry while another reader's share reaches the period's
	// end, in autocommit mode (name, owner, token, then name, owner,
	// token, name, token twice): it deletes the share and row-locks one
	// such share of another reader until its commit, as
	// ReleaseJoined's procedure does first, or does nothing (or fails
	// at once on a locked row), and ReleaseJoined decides.
	LeaveJoined string

	// Acquire, Release and Renew do AcquireShare, ReleaseShare and
	// RenewShare each in one round trip where the database can
	// (PostgreSQL: the first two call functions of the migrations); empty
	// elsewhere, where they are transactions of the statements above.
	Acquire, Release, Renew string
	// ReleaseJoined, where not empty (MariaDB: a CALL of MySQL migration
	// 00023's procedure), is Release for a share that joined a period
	// (ShareResult.Joined): it leaves the name's row alone while another
	// reader's share, locked until its commit, reaches the period's end.
	ReleaseJoined string
}

// lockWaitMs bounds a PostgreSQL shared-lock statement's wait for a row
// another transaction locked (the functions of migration 00005 set the
// same); MariaDB waits a second, MySQL 8 not at all, and shareLockedMax bounds
// the retries.
const lockWaitMs = "100"

// shareLockedMax bounds the retries of a shared-lock acquisition whose row
// another transaction held locked; then the name is reported held by it.
const shareLockedMax = 200 * time.Millisecond

// shareEndLockedMax is shareLockedMax for a release or a renewal, which
// keeps trying longer: giving up for mere contention leaves a share to
// its expiry (a release) or puts a live lease at risk (a renewal). Eight
// SQLite readers releasing one name at once on a loaded machine took
// longer than 200 ms to all get the database's write lock.
const shareEndLockedMax = 5 * time.Second

// ShareParams are the inputs of AcquireShare.
type ShareParams struct {
	Name, Owner string
	TTL         time.Duration
	Metadata    string
}

// ShareResult is the outcome of AcquireShare.
type ShareResult struct {
	Acquired bool
	// Token is the readers' period's token (a downgrade: the exclusive
	// hold's own).
	Token dblock.Token
	// Holder names the holder that refused the read (Owner empty and Mode
	// read: readers, refused because a writer waits).
	Holder Holder
	// WriterWaits is true when readers hold the name and a waiting writer
	// refused this new reader.
	WriterWaits bool
	// Granted is how long the share lasts from its acquisition by the
	// database clock when shorter than the TTL asked for (a reader that
	// joined without locking the row gets what is left of the readers'
	// period, at least half the TTL); zero when it got the TTL.
	Granted time.Duration
	// Joined is true when the share ends with a period that was running
	// (Granted shorter than the TTL): other readers most likely hold the
	// name too, and ReleaseJoinedShare is the release to use.
	Joined bool
	// Recorded is true when SharedSQL.TakeFree began the period with the
	// reader recorded in the name's row: ReleaseRecordedShare is the
	// release to use.
	Recorded bool
}

// grant records how long the share lasts (µs, as the database counted it
// from its acquisition) and whether it joined a running period: granted
// shorter than the TTL asked for.
func (r *ShareResult) grant(grantedUs int64, ttl time.Duration) {
	r.Granted = time.Duration(grantedUs) * time.Microsecond
	r.Joined = r.Granted > 0 && r.Granted < ttl
}

// sharedRow is a name's row as LockRow read it (times in µs).
type sharedRow struct {
	owner               string
	free                bool // owner IS NULL.
	version             int64
	mode                string
	expires, now        int64
	sharedUntil, wanted int64
	reentry             int
	next                Reservation // The name's reservation (see reserve.go).
	reader              string      // The reader recorded in the row (owner "").
}

// live reports whether the row names an unexpired holder (readers included).
func (r sharedRow) live() bool { return !r.free && r.expires > r.now }

// holder is the row as a Holder.
func (r sharedRow) holder() Holder {
	h := Holder{Exists: true, Owner: r.owner, Version: r.version, Mode: r.mode, Reentry: r.reentry, Now: Micros(r.now), Next: r.next}
	if r.expires != 0 && !r.free {
		h.ExpiresAt = Micros(r.expires)
	}
	return h
}

// reservedFor reports whether the row is free or expired and a live
// reservation keeps it for another owner than owner: a new readers' period
// is refused, as an exclusive acquirer is.
func (r sharedRow) reservedFor(owner string) bool {
	return !r.live() && r.holder().ReservedFor(owner)
}

// share is a reader's row of dblock_shares.
type share struct {
	found   bool
	token   int64
	reentry int
	expires int64
}

// errRowLocked: LockRow found the row locked by another transaction past
// shareLockedMax (a pessimistic holder).
var errRowLocked = errors.New("the name's row is locked by another transaction")

// sharedTx runs fn in a write transaction holding name's row locked (the row
// is inserted first if missing) and commits when fn asks to. A row locked
// elsewhere is waited for limit at most (errRowLocked).
func (db *DB) sharedTx(ctx context.Context, name string, limit time.Duration, fn func(tx *sqlx.Tx, r sharedRow) (commit bool, err error)) error {
	return db.retryRowLocked(ctx, limit, func() error { return db.sharedAttempt(ctx, name, fn) })
}

// sharedAttempt is one transaction of sharedTx.
func (db *DB) sharedAttempt(ctx context.Context, name string, fn func(tx *sqlx.Tx, r sharedRow) (bool, error)) error {
	for range 3 {
		tx, end, err := db.beginShortTx(ctx)
		if err != nil {
			return err
		}
		found, err := db.sharedRun(ctx, tx, name, fn)
		end()
		if err != nil || found {
			return err
		}
		// No row: insert it on the pool (outside the transaction, whose
		// locking read of the missing key would make the insert wait on
		// MySQL), then lock it.
		if err := db.EnsureRow(ctx, nil, name); err != nil {
			return err
		}
	}
	return errRowLocked // Deleted as often as inserted (the reaper): try again later.
}

// sharedRun locks name's row in tx and runs fn, ending tx; found is false
// when the row is missing (SQLite inserts it in tx instead).
func (db *DB) sharedRun(ctx context.Context, tx *sqlx.Tx, name string, fn func(tx *sqlx.Tx, r sharedRow) (bool, error)) (found bool, err error) {
	r, found, err := db.lockShared(ctx, tx, name)
	if err == nil && !found && !db.Dialect.Caps().RowLocks {
		if err = db.EnsureRow(ctx, tx, name); err == nil {
			r, found, err = db.lockShared(ctx, tx, name)
		}
	}
	if err != nil || !found {
		_ = tx.Rollback()
		return found, err
	}
	commit, err := fn(tx, r)
	if err != nil || !commit {
		_ = tx.Rollback()
		return true, err
	}
	return true, db.Classify(tx.Commit())
}

// lockShared runs LockRow in tx.
func (db *DB) lockShared(ctx context.Context, tx *sqlx.Tx, name string) (sharedRow, bool, error) {
	var (
		r                   sharedRow
		nextOwner           string
		nextSince, nextTill int64
	)
	err := tx.QueryRowxContext(ctx, db.Dialect.Shared().LockRow, name).Scan(
		&r.owner, &r.free, &r.version, &r.mode, &r.expires, &r.now, &r.sharedUntil, &r.wanted, &r.reentry,
		&nextOwner, &nextSince, &nextTill, &r.reader)
	r.next = reservationOf(nextOwner, nextSince, nextTill)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, db.Classify(err)
	}
	return r, true, nil
}

// readShare reads owner's share of name in tx.
func (db *DB) readShare(ctx context.Context, tx *sqlx.Tx, name, owner string) (share, error) {
	var s share
	err := tx.QueryRowxContext(ctx, db.Dialect.Shared().ReadShare, name, owner).Scan(&s.token, &s.reentry, &s.expires)
	if errors.Is(err, sql.ErrNoRows) {
		return share{}, nil
	}
	s.found = err == nil
	return s, db.Classify(err)
}

// updateRow writes the row's shared-lock columns in tx.
func (db *DB) updateRow(ctx context.Context, tx *sqlx.Tx, name string, r sharedRow) error {
	var owner sql.NullString
	var expires, shared sql.NullInt64
	if !r.free {
		owner = sql.NullString{String: r.owner, Valid: true}
		expires = sql.NullInt64{Int64: r.expires, Valid: true}
	}
	if r.sharedUntil != 0 {
		shared = sql.NullInt64{Int64: r.sharedUntil, Valid: true}
	}
	_, err := tx.ExecContext(ctx, db.Dialect.Shared().Update, owner, r.reentry, expires, shared, name)
	return db.Classify(err)
}

// ShareHolder reads owner's share of name and the name's row, without
// locking, as a Holder: Owner is the share's owner and Version its token
// while the row still holds the name for readers at that token (or for
// owner's exclusive hold); a share whose row no longer does is reported
// with an empty Owner, a missing share as not Exists.
func (db *DB) ShareHolder(ctx context.Context, name, owner string) (Holder, error) {
	var (
		s          share
		now        int64
		rowOwner   sql.NullString
		rowFree    sql.NullBool
		rowVersion sql.NullInt64
	)
	err := db.QueryRowxContext(ctx, db.Dialect.Shared().Holder, name, owner, name, owner).Scan(
		&s.token, &s.reentry, &s.expires, &now, &rowOwner, &rowFree, &rowVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return Holder{}, nil
	}
	if err != nil {
		return Holder{}, db.Classify(err)
	}
	h := Holder{Exists: true, Reentry: s.reentry, ExpiresAt: Micros(s.expires), Now: Micros(now)}
	holds := rowVersion.Valid && rowVersion.Int64 == s.token && rowOwner.Valid && (rowOwner.String == "" || rowOwner.String == owner)
	if holds {
		h.Owner, h.Version, h.Mode = owner, s.token, readMode
	}
	return h, nil
}

// WantWrite marks a writer waiting for name while readers hold it, for d
// by the database clock: new readers are refused until then.
func (db *DB) WantWrite(ctx context.Context, name string, d time.Duration) error {
	_, err := db.ExecContext(ctx, db.Dialect.Shared().Want, d.Microseconds(), name)
	return db.Classify(err)
}

// UnwantWrite clears a writer's mark on name (it took the name).
func (db *DB) UnwantWrite(ctx context.Context, name string) error {
	_, err := db.ExecContext(ctx, db.Dialect.Shared().Unwant, name)
	return db.Classify(err)
}

// ShareInfo is one unexpired share, as ListShares reads it.
type ShareInfo struct {
	Name, Owner string
	Token       int64
	Reentry     int
	AcquiredAt  time.Time
	ExpiresAt   time.Time
}

// ListShares reads the unexpired shares of names (of every name when
// names is empty), by name and owner.
func (db *DB) ListShares(ctx context.Context, names []string) ([]ShareInfo, error) {
	if err := validateNames(names); err != nil {
		return nil, err
	}
	rows, err := db.QueryxContext(ctx, db.filterNames(db.Dialect.Shared().List, names), nameArgs(names)...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []ShareInfo
	for rows.Next() {
		var s ShareInfo
		var acq, exp int64
		if err := rows.Scan(&s.Name, &s.Owner, &s.Token, &s.Reentry, &acq, &exp); err != nil {
			return nil, db.Classify(err)
		}
		s.AcquiredAt, s.ExpiresAt = Micros(acq), Micros(exp)
		out = append(out, s)
	}
	return out, db.Classify(rows.Err())
}

// beginShortTx begins the short write transaction of a shared lock or a
// semaphore's grant: READ COMMITTED where the database has row locks, so
// that its reads see every transaction committed before they ran, and its
// locking reads of missing keys take no gap locks (MySQL's REPEATABLE READ
// would make grants and readers of unrelated names wait for each other, or
// deadlock); on SQLite, BeginWriteTx.
func (db *DB) beginShortTx(ctx context.Context) (*sqlx.Tx, func(), error) {
	if !db.Dialect.Caps().RowLocks {
		return db.BeginWriteTx(ctx)
	}
	tx, end, err := db.BeginPinned(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	return tx, end, db.Classify(err)
}
