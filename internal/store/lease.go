package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// LeaseSQL holds the statements of lease locks (optimistic and fair modes).
// No statement waits for a row lock: a name whose row a pessimistic
// transaction holds is reported as not acquired at once.
type LeaseSQL struct {
	// Acquire takes a name for an owner when the row is missing, free,
	// expired by the database clock, or already the owner's (reentry). One
	// statement; a fresh hold gets a new fencing token, a reentry keeps it.
	Acquire string
	// Release decrements reentry, freeing the row at zero; a CAS on (name,
	// owner, version). On PostgreSQL it commits asynchronously and notifies.
	Release string
	// ReleaseKept: Release returns a row, the owner of another owner's live
	// reservation of the name it freed ('' when none, or when the name stays
	// held), and announces the release to that owner alone (see keptfor.go).
	// It binds a fourth parameter, quiet: a release that frees a name no
	// reservation keeps announces nothing when quiet (ReleaseLeaseKept).
	ReleaseKept bool
	// Renew extends an unexpired lease; a CAS on (name, owner, version).
	Renew string
	// Holder reads a name's row and the database clock.
	Holder string
	// Guard, run in the caller's transaction, finds the row only while it
	// still names (owner, version) unexpired, and keeps it so until commit.
	// The expiry is checked against the clock once the row is locked: a
	// Guard that waited for another transaction's lock (a pessimistic
	// holder that took the name when the lease ran out) must not pass on a
	// clock read before the wait.
	Guard string
	// GuardTwice: Guard's clock is its statement's start (MySQL's
	// UTC_TIMESTAMP), read before any lock wait, so GuardLease runs it a
	// second time once the row is locked: that run waits for nothing and
	// reads the clock after the lock.
	GuardTwice bool
	// ForceRelease frees a name whoever holds it (administrators only).
	ForceRelease string
	// Proclaim replaces the metadata of an unexpired lease; a CAS on (name,
	// owner, version). PostgreSQL and SQLite bind (name, owner, version,
	// metadata), MySQL (metadata, name, owner, version).
	Proclaim string
	// Exists finds a name's row without locking it.
	Exists string
	// FloorInTx and AcquireInTx (MySQL/MariaDB) replace Acquire inside a
	// transaction that runs other statements too (AcquireLeases, a fair
	// waiter's take): FloorInTx reads the fencing floor with a skip-locked
	// shared lock, which the transaction then keeps until it ends, and
	// AcquireInTx is Acquire with that floor as its third parameter. One
	// statement cannot do both there: on MariaDB a statement told not to
	// wait (innodb_lock_wait_timeout=0) that skips a locked row fails inside
	// a transaction with "Error 1180: Got error 1 during COMMIT" (in
	// autocommit mode it does not).
	FloorInTx, AcquireInTx string
	// AcquireReturning and AcquireInTxReturning (MariaDB) are Acquire and
	// AcquireInTx returning the row as they left it (owner, version,
	// reentry, mode, expiry µs, clock µs) instead of reporting through the
	// OK packet, whose insert id a trigger on dblock_locks (the history's)
	// hides. They run while a trigger was seen lately (see
	// DB.returningAcquire); the OK packet is cheaper to read otherwise.
	AcquireReturning, AcquireInTxReturning string
	// TakeFree (PostgreSQL, MariaDB), where not empty, takes a name's
	// existing row in autocommit mode when it is free (no live lease, no
	// other owner's live reservation), as a conditional update: cheaper than
	// Acquire, which also covers a missing row, a re-entry and a refusal's
	// holder. It does not re-enter (an owner's live lease is not free) and
	// never waits for a row another transaction holds. On MariaDB it is a
	// plain UPDATE, where Acquire's upsert reads the fencing floor and tries
	// an insert first (a row that exists keeps its version growing, so the
	// floor, which only carries versions across a deletion, is not needed),
	// and reports through the OK packet: one affected row, the token as
	// insert id. On PostgreSQL it locks the row FOR UPDATE SKIP LOCKED and
	// updates it, returning the token, where Acquire adds the insert of a
	// missing row and the holder's read. Acquire runs after it when it took
	// nothing, and instead of it for a name this DB did not free lately (see
	// takefree.go).
	TakeFree string
	// OwnedToken (MySQL/MariaDB) reads the version and reentry count of a
	// name's row held by an owner: the token of an acquisition whose insert
	// id a trigger hid.
	OwnedToken string
	// Reserve and Unreserve keep a free name for a waiting owner and give
	// it up (see reserve.go).
	Reserve, Unreserve string
	// HandOver (PostgreSQL), where not empty, is Release that hands the
	// name, in the same statement, to an acquisition of another owner
	// waiting in the releasing Locker's line (see leasehandover.go).
	HandOver string
	// MarkListened (PostgreSQL) records on a name's row that a waiter
	// listens for its release, until a time by the database clock (see
	// listened.go); empty where releases are not announced.
	MarkListened string
}

// NotifyChannel is the PostgreSQL channel on which releases are announced;
// the payload is the lock name, or name + NoticeSep + owner for a release
// that freed a name a reservation keeps for that owner (see keptfor.go).
const NotifyChannel = "dblock"

// AcquireParams are the inputs of AcquireLease.
type AcquireParams struct {
	Name     string
	Owner    string
	Mode     string // dblock.ModeOptimistic or dblock.ModeFair.
	TTL      time.Duration
	Metadata string // Empty stores NULL.
	// QueueGuard refuses the acquisition while a live fair waiter queues for
	// the name, unless the owner holds the name already (reentry): the fair
	// mode's direct path, which must never jump a waiter whose row committed
	// before the acquisition began. PostgreSQL and SQLite check the queue in
	// the acquiring statement. MySQL reads the queue (without locking) and
	// stops there if anyone waits or holds the name; else it acquires, then
	// reads the waiters created no later than the lease was acquired and,
	// finding any, releases at once (see QueueSQL.Jumped). Autocommit only
	// (q nil).
	QueueGuard bool
	// QueueQuiet, with QueueGuard, says that the caller has not met a
	// holder or a queue for the name lately: MySQL then acquires at once
	// and relies on the check after the acquisition alone (two statements
	// instead of three when nobody queues; a waiter that did queue gets the
	// name back from the release that follows). Elsewhere it changes
	// nothing.
	QueueQuiet bool
	// FreeSeen says that the caller has just seen the name free, or was
	// woken by its release: the acquisition tries LeaseSQL.TakeFree first
	// where the dialect has it, as it does for a name this DB released
	// lately (a waiter of another process the release was announced to, a
	// poller that read the row free). Autocommit only.
	FreeSeen bool
}

// AcquireResult is the outcome of AcquireLease.
type AcquireResult struct {
	Acquired bool
	Token    dblock.Token // The fencing token when acquired.
	// Reentry is the owner's acquisition count after this one (1 for a first
	// acquisition); 0 when unknown (MySQL reports it only for a new row).
	Reentry int
	// Holder is the current holder when not acquired (Exists false if
	// unknown); Holder.Now is the database clock, so ExpiresAt - Now is the
	// time left on the holder's lease.
	Holder Holder
	// Waiters counts the live fair waiters that refused an acquisition with
	// QueueGuard (zero otherwise).
	Waiters int
	// Statements counts the round trips the call sent (at least 1), for
	// callers that report statements per acquisition.
	Statements int
}

// Holder is a name's row as the database sees it.
type Holder struct {
	Exists    bool
	Owner     string // Empty when free (or held by a pessimistic transaction, which writes no owner).
	Version   int64
	Mode      string
	Reentry   int       // The owner's acquisition count (0 when free; as read by LeaseHolder only).
	ExpiresAt time.Time // Zero when there is no lease.
	Now       time.Time // The database clock when read.
	// Reason says why an acquisition was refused when no lease holder or
	// pessimistic transaction can be named: another transaction held the
	// name's key (an insert of the same name in progress) or the fencing
	// floor. Nil otherwise.
	Reason error
	// Next is the name's reservation (none, or not known: Owner empty).
	Next Reservation
}

// ReservedFor reports whether a live reservation keeps the name for
// another owner than owner.
func (h Holder) ReservedFor(owner string) bool {
	return h.Next.LiveAt(h.Now) && h.Next.Owner != owner
}

// markReserved gives the refusal of owner's acquisition ErrReserved as its
// reason when nobody holds the name and another owner's reservation kept
// it (a lease's acquisition and a reader's alike).
func (h *Holder) markReserved(owner string) {
	if h.Reason == nil && !h.Held() && h.ReservedFor(owner) {
		h.Reason = ErrReserved
	}
}

// Reasons of a refusal without a known holder (Holder.Reason).
var (
	// ErrKeyLocked: the name has no committed row, yet another transaction
	// holds its key (an acquisition or a pessimistic lock inserting the row).
	ErrKeyLocked = errors.New("its key is locked by another transaction (an insert of the same name in progress)")
	// ErrFenceBusy: the fencing floor's row (dblock_fence) stayed locked by
	// another transaction for longer than an acquisition waits for it.
	ErrFenceBusy = errors.New("the fencing floor (dblock_fence) is locked by another transaction")
	// ErrReserved: the name is free (or its lease expired), but a waiting
	// owner reserved it (see DB.ReserveLease).
	ErrReserved = errors.New("the name is free but kept for an owner that was waiting for it (its reservation)")
)

// Held reports whether the row names an unexpired lease holder, or is held
// by readers (Mode dblock.ModeRead with no owner: see SharedSQL).
func (h Holder) Held() bool {
	return h.Exists && (h.Owner != "" || h.Mode == dblock.ModeRead) && h.ExpiresAt.After(h.Now)
}

// HeldError returns the *dblock.HeldError describing h for name; h.Reason,
// if any, joins cause.
func (h Holder) HeldError(name string, cause error) *dblock.HeldError {
	switch {
	case h.Reason != nil && cause == nil:
		cause = h.Reason
	case h.Reason != nil:
		cause = fmt.Errorf("%w (%w)", cause, h.Reason)
	}
	e := &dblock.HeldError{Name: name, Owner: h.Owner, Mode: h.Mode, ExpiresAt: h.ExpiresAt, Cause: cause}
	return e
}

// q is the Querier a statement runs on: q, or for nil (and the pool
// itself) db, whose queries run under PoolContext (unwatched.go).
func (db *DB) q(q Querier) Querier {
	if q == nil || q == Querier(db.DB) {
		return db
	}
	return q
}

// onPool reports whether q is the pool (db.q(nil), or the *sqlx.DB).
func (db *DB) onPool(q Querier) bool { return q == Querier(db) || q == Querier(db.DB) }

// queryRow scans the first row of query on q into dest: on the pool,
// through the driver's native interface where it has one, else prepared
// when query is one of the prepared set (see prepared.go). Errors are
// unclassified; a missing row is sql.ErrNoRows.
func (db *DB) queryRow(ctx context.Context, q Querier, query string, args []any, dest ...any) error {
	if db.onPool(q) {
		if db.native != nil {
			return db.native.QueryRow(ctx, query, args, dest...)
		}
		ctx = db.PoolContext(ctx)
		if st := db.prepared.stmt(ctx, query); st != nil {
			return st.QueryRowContext(ctx, args...).Scan(dest...)
		}
	}
	return q.QueryRowxContext(ctx, query, args...).Scan(dest...)
}

// AcquireLease runs the one-statement acquire on q (nil: the pool). A row held
// by a pessimistic transaction comes back as not acquired (Holder.Mode
// pessimistic), never as a wait. Errors are classified.
func (db *DB) AcquireLease(ctx context.Context, q Querier, p AcquireParams) (AcquireResult, error) {
	res, err := db.acquireLease(ctx, q, p)
	if res.Statements == 0 {
		res.Statements = 1
	}
	if !res.Acquired {
		res.Holder.markReserved(p.Owner)
	}
	return res, err
}

func (db *DB) acquireLease(ctx context.Context, q Querier, p AcquireParams) (AcquireResult, error) {
	if p.QueueGuard {
		return db.Dialect.acquireGuarded(ctx, db, p)
	}
	q = db.q(q)
	if !db.takesFree(q, p) {
		return db.Dialect.acquireLease(ctx, db, q, p)
	}
	return db.acquireFreeFirst(ctx, q, p)
}

// leaseEngine is the lease statements' binding on one database.
type leaseEngine interface {
	// acquireLease is AcquireLease without QueueGuard; q is not nil.
	acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error)
	// takeFree runs LeaseSQL.TakeFree once for p on the pool (see
	// takefree.go), or nothing (takeSkipped).
	takeFree(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, freeTake, error)
	// acquireGuarded is AcquireLease with QueueGuard (autocommit).
	acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error)
	renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error)
	proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error)
	// beginWriteTx is BeginWriteTx.
	beginWriteTx(ctx context.Context, db *DB) (tx *sqlx.Tx, end func(), err error)
	// onPool is onPoolShortBusy with q nil.
	onPool(ctx context.Context, db *DB, fn func(q Querier) error) error
}

// sleepCtx waits d, or until ctx ends (returning its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ReleaseLease runs the release CAS; it reports whether the row named (owner,
// token) and was released (or its reentry count decremented).
func (db *DB) ReleaseLease(ctx context.Context, q Querier, name, owner string, token dblock.Token) (bool, error) {
	released, _, err := db.releaseLease(ctx, q, name, owner, token, false)
	return released, err
}

// ReleaseLeaseKept is ReleaseLease on the pool for a caller that lines up
// waiters of its own on name (a Locker). kept is the owner of the live
// reservation that kept the freed name for another waiter ("" when none
// did, or where the release cannot tell, see keptfor.go). quiet: the
// caller hands the name on to its own next waiter, so where releases are
// announced, one that frees a name no reservation keeps for another owner
// is not, and other processes' waiters do not wake only to be refused.
// They look again on their own schedule, and reserve the name.
func (db *DB) ReleaseLeaseKept(ctx context.Context, name, owner string, token dblock.Token, quiet bool) (released bool, kept string, err error) {
	return db.releaseLease(ctx, nil, name, owner, token, quiet)
}

func (db *DB) releaseLease(ctx context.Context, q Querier, name, owner string, token dblock.Token, quiet bool) (bool, string, error) {
	ls := db.Dialect.Lease()
	if !ls.ReleaseKept {
		released, err := db.execOne(ctx, db.q(q), ls.Release, name, owner, int64(token))
		if released {
			db.noteReleased(name)
		}
		return released, "", err
	}
	var kept string
	err := db.queryRow(ctx, db.q(q), ls.Release, []any{name, owner, int64(token), quiet}, &kept)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", db.Classify(err)
	}
	db.noteReleased(name)
	return true, kept, nil
}

// RenewLease extends an unexpired lease by ttl from the database's now; it
// reports whether the row still named (owner, token) unexpired.
func (db *DB) RenewLease(ctx context.Context, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.Dialect.renewLease(ctx, db, db.q(q), name, owner, token, ttl)
}

// SetLeaseMetadata replaces the metadata of the lease (owner, token) on name
// while it is unexpired by the database clock (an empty metadata stores
// NULL); it reports whether the row still named (owner, token) unexpired.
func (db *DB) SetLeaseMetadata(ctx context.Context, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.Dialect.proclaim(ctx, db, db.q(q), name, owner, token, metadata)
}

// LeaseHolder reads name's row and the database clock (Exists false when there is no row).
func (db *DB) LeaseHolder(ctx context.Context, q Querier, name string) (Holder, error) {
	q = db.q(q)
	var h Holder
	var expUs, nowUs, sinceUs, untilUs int64
	var next string
	err := db.queryRow(ctx, q, db.Dialect.Lease().Holder, []any{name}, &h.Owner, &h.Version, &h.Mode, &expUs, &nowUs, &h.Reentry,
		&next, &sinceUs, &untilUs)
	if errors.Is(err, sql.ErrNoRows) {
		return Holder{}, nil
	}
	if err != nil {
		return Holder{}, db.Classify(err)
	}
	h.Exists = true
	if expUs != 0 {
		h.ExpiresAt = Micros(expUs)
	}
	h.Now = Micros(nowUs)
	h.Next = reservationOf(next, sinceUs, untilUs)
	return h, nil
}

// RowQuerier runs a statement that returns a row: a *sql.Tx, a *sqlx.Tx,
// or a caller's own transaction type.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// GuardLease checks, inside the caller's transaction, that name is still held
// by (owner, token) and unexpired by the database clock, and keeps it so until
// the transaction ends. It reports false when the lease no longer holds.
func (db *DB) GuardLease(ctx context.Context, tx RowQuerier, name, owner string, token dblock.Token) (bool, error) {
	ls := db.Dialect.Lease()
	ok, err := db.guardOnce(ctx, tx, ls.Guard, name, owner, token)
	if ok && ls.GuardTwice {
		ok, err = db.guardOnce(ctx, tx, ls.Guard, name, owner, token)
	}
	return ok, err
}

// guardOnce runs the Guard statement once.
func (db *DB) guardOnce(ctx context.Context, tx RowQuerier, query, name, owner string, token dblock.Token) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, query, name, owner, int64(token)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, db.Classify(err)
}

// ForceRelease frees name whoever holds its lease (administrators only). It
// reports whether a holder was removed. A name held by a pessimistic
// transaction cannot be freed this way: end that session instead. A bad name
// is refused with an error wrapping dblock.ErrInvalidName.
func (db *DB) ForceRelease(ctx context.Context, q Querier, name string) (bool, error) {
	if err := dblock.ValidateName(name); err != nil {
		return false, err
	}
	return db.execOne(ctx, db.q(q), db.Dialect.Lease().ForceRelease, name)
}

func (db *DB) execOne(ctx context.Context, q Querier, query string, args ...any) (bool, error) {
	if db.native != nil && db.onPool(q) {
		n, err := db.native.Exec(ctx, query, args...)
		if err != nil {
			return false, db.Classify(err)
		}
		return n > 0, nil
	}
	r, err := db.exec(ctx, q, query, args...)
	if err != nil {
		return false, db.Classify(err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// AcquireLeases takes every name of ps or none, in one transaction, in the
// order given (callers sort the names, so that two callers asking for
// overlapping sets meet in the same order). It returns the results, all
// acquired, after the commit; or, after a rollback, blocked: the index of
// the first name that could not be taken, whose result names its holder.
// No statement waits for a row lock (as AcquireLease); on SQLite the
// transaction's write lock is waited for sqliteLeaseBusyTimeout at most.
// An error from the commit leaves the outcome unknown: every name or none
// was taken.
func (db *DB) AcquireLeases(ctx context.Context, ps []AcquireParams) (results []AcquireResult, blocked int, err error) {
	blocked = -1
	tx, end, err := db.BeginWriteTx(ctx)
	if err == nil {
		results, blocked, err = db.acquireAllInTx(ctx, tx, ps)
		end()
	}
	if err != nil {
		if blocked < 0 && errors.Is(err, dblock.ErrNotAcquired) {
			// SQLite: another transaction holds the database's write lock
			// (a pessimistic holder), as AcquireLease reports it.
			return []AcquireResult{{Holder: Holder{Exists: true, Mode: dblock.ModePessimistic}}}, 0, nil
		}
		return nil, -1, err
	}
	return results, blocked, nil
}

// acquireAllInTx is AcquireLeases in tx, which it ends.
func (db *DB) acquireAllInTx(ctx context.Context, tx *sqlx.Tx, ps []AcquireParams) (results []AcquireResult, blocked int, err error) {
	results = make([]AcquireResult, 0, len(ps))
	for i, p := range ps {
		res, err := db.AcquireLease(ctx, tx, p)
		if err != nil {
			_ = tx.Rollback()
			return nil, -1, err
		}
		results = append(results, res)
		if !res.Acquired {
			return results, i, db.Classify(tx.Rollback())
		}
	}
	return results, -1, db.Classify(tx.Commit())
}
