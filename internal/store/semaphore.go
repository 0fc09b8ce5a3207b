package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// SemaphoreSQL holds the statements of semaphores (package semaphore). A
// semaphore is its row of dblock_semaphores (name, limit); each grant of
// permits is a row of dblock_permits with its owner, count and lease (its
// id is the grant's token). A grant is made in one transaction that locks
// the semaphore's row, so grants are serialised per name, and counts the
// unexpired permits by the clock Lock read: an expired grant's permits are
// free again without anyone removing it. PostgreSQL does it all in one
// call (Acquire); MySQL and SQLite in a transaction of Ensure (when the row
// is missing), Lock, Used and Grant. Parameters come in the order the
// statement text names them; times are µs since the epoch.
type SemaphoreSQL struct {
	// Ensure (name, limit) inserts the semaphore unless it exists.
	Ensure string
	// Lock (name) locks the semaphore's row, marks it used (updated_at,
	// which the reaper's idle deletion reads) and reads its limit and the
	// clock; on MySQL, Touch (name) marks and locks it first.
	Lock, Touch string
	// Used (name, now) sums the unexpired permits and reads the earliest
	// expiry among them.
	Used string
	// Acquire (name, owner, limit, permits, ttl µs, metadata, request),
	// where set, is AcquirePermits in one statement (dblock_grant_permits:
	// PostgreSQL's function of migration 00020, MariaDB's procedure of MySQL
	// migration 00029): granted, token, the semaphore's limit, the permits
	// out, the earliest expiry among them when refused (µs, 0 if none), the
	// clock. Where MariaDB refuses the procedure, the transaction of plain
	// statements is sent instead.
	Acquire string
	// Grant (name, owner, permits, acquired_at, expires_at, metadata,
	// request) inserts a grant: RETURNING its id (SQLite) or as the insert
	// id (MySQL).
	Grant string
	// Granted (name, request) reads the grant a request made: its id, its
	// expiry and the clock (no row: it made none, or the grant is gone).
	Granted string
	// Renew (ttl µs, id, owner) extends an unexpired grant from the
	// database clock, never shortening it.
	Renew string
	// Release (id, owner) deletes an unexpired grant (PostgreSQL: and
	// announces its name).
	Release string
	// Holder (id) reads a grant's owner, expiry and the clock.
	Holder string
	// SetLimit (name, limit) sets a semaphore's limit, inserting it if
	// needed.
	SetLimit string
	// Read (name) reads the limit and the sum of the unexpired permits.
	Read string
	// List reads the unexpired grants: id, name, owner, permits,
	// acquired_at, expires_at. It ends with its ORDER BY, before which
	// ListPermits puts a filter on names.
	List string
}

// PermitParams are the inputs of AcquirePermits.
type PermitParams struct {
	Name, Owner string
	Limit       int // The limit the caller expects the semaphore to have.
	Permits     int
	TTL         time.Duration
	Metadata    string
	// Request identifies this attempt (NewRequest): the grant records it,
	// so that GrantOf finds the grant of an attempt whose answer was lost.
	Request string
}

// PermitResult is the outcome of AcquirePermits.
type PermitResult struct {
	Acquired bool
	Token    dblock.Token // The grant's id.
	// Used is the permits out (when refused: without this request).
	Used int
	// NextExpiry is the earliest expiry among the grants out when refused
	// (zero if none); Now the database clock.
	NextExpiry, Now time.Time
}

// ErrLimitMismatch: a caller named another limit than the semaphore's.
var ErrLimitMismatch = errors.New("the semaphore exists with another limit")

// limitMismatch is the error of a caller that named want as the limit of
// semaphore name, whose limit is limit.
func limitMismatch(name string, limit, want int) error {
	return fmt.Errorf("%w: semaphore %q: %w: its limit is %d, not %d (a change of limit is an explicit call)",
		dblock.ErrInvalidOption, name, ErrLimitMismatch, limit, want)
}

// AcquirePermits grants p.Permits of semaphore p.Name to p.Owner when that
// many are free by the database clock, in one transaction holding the
// semaphore's row; the semaphore is created with p.Limit if missing. A
// semaphore with another limit is an error wrapping ErrLimitMismatch and
// dblock.ErrInvalidOption.
func (db *DB) AcquirePermits(ctx context.Context, p PermitParams) (PermitResult, error) {
	if db.Dialect.Semaphore().Acquire != "" && !db.noGrantCall.Load() {
		res, err := db.acquirePermitsOne(ctx, p)
		if !ProcedureRefused(err) {
			return res, err
		}
		// Grants from before MariaDB's procedure: the call did nothing;
		// from now on the transaction.
		db.noGrantCall.Store(true)
	}
	var res PermitResult
	err := db.semaphoreTx(ctx, p.Name, p.Limit, func(tx *sqlx.Tx, limit int, now int64) (bool, error) {
		res = PermitResult{Now: Micros(now)}
		if limit != p.Limit {
			return false, limitMismatch(p.Name, limit, p.Limit)
		}
		var used, next int64
		if err := tx.QueryRowxContext(ctx, db.Dialect.Semaphore().Used, p.Name, now).Scan(&used, &next); err != nil {
			return false, db.Classify(err)
		}
		res.Used = int(used)
		if next != 0 {
			res.NextExpiry = Micros(next)
		}
		if res.Used+p.Permits > limit {
			return false, nil
		}
		id, err := db.grant(ctx, tx, p, now)
		if err != nil {
			return false, err
		}
		res.Acquired, res.Token, res.Used = true, dblock.Token(id), res.Used+p.Permits
		return true, nil
	})
	return res, err
}

// acquirePermitsOne is AcquirePermits in one statement (SemaphoreSQL.Acquire).
func (db *DB) acquirePermitsOne(ctx context.Context, p PermitParams) (PermitResult, error) {
	var (
		res                    PermitResult
		token, used, next, now int64
		limit                  int
	)
	args := []any{p.Name, p.Owner, p.Limit, p.Permits, p.TTL.Microseconds(), nullString(p.Metadata), nullString(p.Request)}
	err := db.queryRow(ctx, db, db.Dialect.Semaphore().Acquire, args, &res.Acquired, &token, &limit, &used, &next, &now)
	if err != nil {
		return PermitResult{}, db.Classify(err) // ProcedureRefused still sees the server's error.
	}
	if limit != p.Limit {
		return PermitResult{}, limitMismatch(p.Name, limit, p.Limit)
	}
	res.Token, res.Used, res.Now = dblock.Token(token), int(used), Micros(now)
	if next != 0 {
		res.NextExpiry = Micros(next)
	}
	return res, nil
}

// grant inserts p's grant in tx at now; it returns its id.
func (db *DB) grant(ctx context.Context, tx *sqlx.Tx, p PermitParams, now int64) (int64, error) {
	q := db.Dialect.Semaphore().Grant
	args := []any{p.Name, p.Owner, p.Permits, now, now + p.TTL.Microseconds(), nullString(p.Metadata), nullString(p.Request)}
	if db.Dialect.Caps().Returning {
		var id int64
		err := tx.QueryRowxContext(ctx, q, args...).Scan(&id)
		return id, db.Classify(err)
	}
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, db.Classify(err)
	}
	return r.LastInsertId()
}

// semaphoreTx runs fn in a write transaction holding name's semaphore row
// locked, committing when fn asks to. A missing row is inserted with limit
// (on the pool, outside the transaction, where the database has row locks)
// and the transaction run again; an existing one costs no insert.
func (db *DB) semaphoreTx(ctx context.Context, name string, limit int, fn func(tx *sqlx.Tx, limit int, now int64) (bool, error)) error {
	for range 3 {
		tx, end, err := db.beginShortTx(ctx)
		if err != nil {
			return err
		}
		commit, found, err := db.semaphoreAttempt(ctx, tx, name, fn)
		if err != nil || !commit {
			_ = tx.Rollback()
		} else {
			err = db.Classify(tx.Commit())
		}
		end()
		if err != nil || found {
			return err
		}
		if _, err := db.ExecContext(ctx, db.Dialect.Semaphore().Ensure, name, limit); err != nil {
			return db.Classify(err)
		}
	}
	return fmt.Errorf("%w: semaphore %q: its row was deleted as often as it was created", dblock.ErrUnavailable, name)
}

// semaphoreAttempt locks the semaphore's row in tx and runs fn; found is
// false when the row was missing.
func (db *DB) semaphoreAttempt(ctx context.Context, tx *sqlx.Tx, name string, fn func(tx *sqlx.Tx, limit int, now int64) (bool, error)) (commit, found bool, err error) {
	s := db.Dialect.Semaphore()
	if s.Touch != "" {
		if _, err := tx.ExecContext(ctx, s.Touch, name); err != nil {
			return false, false, db.Classify(err)
		}
	}
	var lim int
	var now int64
	err = tx.QueryRowxContext(ctx, s.Lock, name).Scan(&lim, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil // Deleted by the reaper since Ensure.
	}
	if err != nil {
		return false, false, db.Classify(err)
	}
	commit, err = fn(tx, lim, now)
	return commit, true, err
}

// RenewPermits extends the unexpired grant id of owner to ttl from the
// database clock; it reports false when the grant is gone or expired.
func (db *DB) RenewPermits(ctx context.Context, id dblock.Token, owner string, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, db, db.Dialect.Semaphore().Renew, ttl.Microseconds(), int64(id), owner)
}

// ReleasePermits deletes the unexpired grant id of owner; it reports false
// when there is none (released already, expired, or not owner's).
func (db *DB) ReleasePermits(ctx context.Context, id dblock.Token, owner string) (bool, error) {
	return db.execOne(ctx, db, db.Dialect.Semaphore().Release, int64(id), owner)
}

// NewRequest draws the id of one grant attempt (PermitParams.Request).
func NewRequest() string { return rand.Text() }

// GrantOf reads the grant that request made on semaphore name: Exists
// false when it made none or the grant is gone; Version is its id (the
// token) and ExpiresAt its expiry, by the clock Now (Owner is not read).
func (db *DB) GrantOf(ctx context.Context, name, request string) (Holder, error) {
	var id, exp, now int64
	err := db.QueryRowxContext(ctx, db.Dialect.Semaphore().Granted, name, request).Scan(&id, &exp, &now)
	return db.grantHolder(err, id, "", exp, now)
}

// PermitsHolder reads grant id as a Holder (Exists false when it is gone).
func (db *DB) PermitsHolder(ctx context.Context, id dblock.Token) (Holder, error) {
	var owner string
	var exp, now int64
	err := db.QueryRowxContext(ctx, db.Dialect.Semaphore().Holder, int64(id)).Scan(&owner, &exp, &now)
	return db.grantHolder(err, int64(id), owner, exp, now)
}

// grantHolder is the Holder of grant id read with err (sql.ErrNoRows:
// none, Exists false), its owner, expiry and the clock (µs).
func (db *DB) grantHolder(err error, id int64, owner string, exp, now int64) (Holder, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return Holder{}, nil
	}
	if err != nil {
		return Holder{}, db.Classify(err)
	}
	return Holder{Exists: true, Owner: owner, Version: id, Mode: dblock.ModeSemaphore, Reentry: 1,
		ExpiresAt: Micros(exp), Now: Micros(now)}, nil
}

// SetSemaphoreLimit sets name's limit (creating the semaphore if needed).
// Grants out are kept; while they exceed the new limit nobody is granted.
func (db *DB) SetSemaphoreLimit(ctx context.Context, name string, limit int) error {
	_, err := db.ExecContext(ctx, db.Dialect.Semaphore().SetLimit, name, limit)
	return db.Classify(err)
}

// SemaphoreState is a semaphore as SemaphoreOf reads it.
type SemaphoreState struct {
	Exists bool
	Limit  int
	Used   int // Unexpired permits out.
}

// SemaphoreOf reads name's limit and the permits out.
func (db *DB) SemaphoreOf(ctx context.Context, name string) (SemaphoreState, error) {
	var st SemaphoreState
	err := db.QueryRowxContext(ctx, db.Dialect.Semaphore().Read, name).Scan(&st.Limit, &st.Used)
	if errors.Is(err, sql.ErrNoRows) {
		return SemaphoreState{}, nil
	}
	st.Exists = err == nil
	return st, db.Classify(err)
}

// PermitInfo is one unexpired grant, as ListPermits reads it.
type PermitInfo struct {
	ID          int64
	Name, Owner string
	Permits     int
	AcquiredAt  time.Time
	ExpiresAt   time.Time
}

// ListPermits reads the unexpired grants of names (of every name when
// names is empty), by name and id.
func (db *DB) ListPermits(ctx context.Context, names []string) ([]PermitInfo, error) {
	if err := validateNames(names); err != nil {
		return nil, err
	}
	rows, err := db.QueryxContext(ctx, db.filterNames(db.Dialect.Semaphore().List, names), nameArgs(names)...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []PermitInfo
	for rows.Next() {
		var p PermitInfo
		var acq, exp int64
		if err := rows.Scan(&p.ID, &p.Name, &p.Owner, &p.Permits, &acq, &exp); err != nil {
			return nil, db.Classify(err)
		}
		p.AcquiredAt, p.ExpiresAt = Micros(acq), Micros(exp)
		out = append(out, p)
	}
	return out, db.Classify(rows.Err())
}
