package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// queueEngine is the binding of the fair queue's statements on one database (see engine).
type queueEngine interface {
	// enqueue is Enqueue on q (not nil).
	enqueue(ctx context.Context, db *DB, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, error)
	// checkArgs is Check's argument list for waiter id of name.
	checkArgs(name string, id int64) []any
}

// errTakeInTx is TakeHead's refusal where a waiter takes the lock in a
// transaction of AcquireLease and TakeWaiter (TakesHeadInOne is false).
var errTakeInTx = errors.New("store: this database takes a waiter's lock in a transaction (AcquireLease, TakeWaiter), not with TakeHead")

// QueueSQL holds the statements of the fair wait queue (dblock_waiters).
//
// Every statement numbers its bind parameters in the order they appear in
// the text, so one argument list serves every dialect, MySQL's positional ?
// included; Check alone takes its list from the engine (checkArgs), since
// PostgreSQL's names each argument once. A waiter is live while its
// expires_at (the heartbeat deadline) is later than the database clock;
// dead waiters are skipped by every statement here and removed by the
// reaper.
type QueueSQL struct {
	// Enqueue inserts a waiter (name, owner, kind, heartbeat timeout µs) stamped by
	// the database clock. On PostgreSQL and SQLite it returns id and
	// created_at; on MySQL the id comes from LAST_INSERT_ID.
	Enqueue string
	// EnqueueCheck, where not empty (PostgreSQL; MariaDB: a CALL of the
	// procedure of MySQL migration 00021), is Enqueue's insert
	// (name, owner, kind, heartbeat timeout µs) answering, in one
	// statement, what Check would for the new waiter: its id and
	// created_at, the live waiters ahead of it in its kind's way, the
	// heartbeat deadline of the nearest, the lock row and the clock.
	EnqueueCheck string
	// HeartbeatMany (timeout µs, then the ids, whose placeholders fill its
	// %s) is Heartbeat for many waiters at once.
	HeartbeatMany string
	// Heartbeat (timeout µs, id) extends a live waiter's deadline; a dead
	// waiter stays dead (it lost its place and must enqueue again).
	Heartbeat string
	// Check (name, name, id, name, name; PostgreSQL's: name, id, see
	// checkArgs) reads, in one snapshot, whether the waiter is live, how
	// many live waiters are ahead of it, the heartbeat deadline of the live
	// waiter directly ahead of it, its created_at, the lock row and the
	// database clock.
	Check string
	// Peek (name, name) reads the number of live waiters of a name, the lock
	// row and the database clock.
	Peek string
	// Take (id) deletes a live waiter; it runs in the transaction that takes
	// the lock, so taking and leaving the queue commit together.
	Take string
	// TakeHead, where not empty (PostgreSQL; MariaDB: a CALL of the
	// procedure of MySQL migration 00021), is the take in one statement:
	// LeaseSQL.Acquire's (name, owner, TTL µs, mode, metadata) for a waiter
	// at the head, taking the lock only while waiter $6 is live and no live
	// waiter is ahead of it, and deleting its row with the take. It returns
	// PostgreSQL's Acquire columns and an eleventh, whether the waiter was
	// live. Empty (MySQL 8, SQLite): the take is a transaction of Acquire and
	// Take.
	TakeHead string
	// HandOver, where not empty (PostgreSQL; MariaDB: a CALL of the
	// procedure of MySQL migration 00028), is the release of a lease
	// (name, owner, token) that hands the name in the same statement to
	// waiter (id, owner, TTL µs, mode, metadata) when that waiter is live
	// and first and the release frees the name; otherwise it releases as
	// LeaseSQL.Release does. It returns one row when the lease was held:
	// whether it was handed, the row's version and reentry count after the
	// statement, and a text to drop.
	HandOver string
	// Leave (id) deletes a waiter that gives up. On PostgreSQL it notifies
	// the name, since the waiters behind it moved up.
	Leave string
	// Direct is the lease acquisition of LeaseSQL.Acquire guarded by the
	// queue, in the same statement: it takes nothing while a live waiter
	// queues for the name, unless the owner holds the name already
	// (reentry). On PostgreSQL, and MariaDB (a CALL of the procedure of
	// MySQL migration 00027), it returns Acquire's columns and the number
	// of live waiters; on SQLite, Acquire's (no row when refused). Empty on
	// MySQL 8 (see Jumped).
	Direct string
	// Jumped (name, owner, version) reads, after a MySQL acquisition, the
	// row's reentry count and how many live waiters were created no later
	// than the lease was acquired, that is, queued before the acquisition
	// began. MySQL only: its INSERT ... SELECT reads the queue with shared
	// next-key locks under REPEATABLE READ, which a no-wait acquisition
	// cannot take while any neighbouring waiter row is being written, so the
	// guard runs as a lockless read right after the acquisition instead.
	Jumped string
	// GatePeek (name, kind, kind, name, owner, name, owner) reads how many
	// live waiters of the name are in the way of a newcomer of that
	// WaitKind, and whether the owner holds the name already (its lease or
	// a live share).
	GatePeek string
	// GateCheck (id) reads whether a waiter is live (a first count of 0
	// when it is not) and how many live waiters ahead of it are in its way
	// (the second).
	GateCheck string
}

// WaiterTicket identifies an enqueued waiter.
type WaiterTicket struct {
	ID int64
	// CreatedAt is the database clock at the insert; zero on MySQL, which
	// cannot return it from the insert (QueueCheck reports it).
	CreatedAt time.Time
}

// QueueState is a name's queue and lock row as one statement saw them.
type QueueState struct {
	// Live reports whether the checked waiter is still live (Check only).
	Live bool
	// Ahead counts the live waiters ahead of the checked waiter (Check), or
	// all live waiters of the name (Peek).
	Ahead int
	// CreatedAt is the checked waiter's created_at (Check only; zero when dead).
	CreatedAt time.Time
	// AheadExpiresAt is the heartbeat deadline of the live waiter directly
	// ahead of the checked one (Check only; zero when none is ahead): if
	// that waiter died, the checked one moves up then. Compare it with
	// Holder.Now, the database clock.
	AheadExpiresAt time.Time
	// Holder is the lock row; Holder.Now is the database clock.
	Holder Holder
}

// Enqueue inserts a waiter of kind for (name, owner) whose heartbeat
// deadline is timeout from the database's now.
func (db *DB) Enqueue(ctx context.Context, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (t WaiterTicket, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		t, err = db.Dialect.enqueue(ctx, db, q, name, owner, kind, timeout)
		return err
	})
	return t, err
}

// EnqueuesChecked reports whether EnqueueChecked is one statement here
// (QueueSQL.EnqueueCheck); elsewhere it refuses.
func (db *DB) EnqueuesChecked() bool { return db.Dialect.Queue().EnqueueCheck != "" }

// errEnqueueCheck is EnqueueChecked's refusal where the database has no
// EnqueueCheck: Enqueue, then CheckWaiter.
var errEnqueueCheck = errors.New("store: this database enqueues and checks a waiter in two statements (Enqueue, CheckWaiter), not with EnqueueChecked")

// EnqueueChecked is Enqueue followed by CheckWaiter of the new waiter, in
// one statement (EnqueuesChecked).
func (db *DB) EnqueueChecked(ctx context.Context, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, QueueState, error) {
	sqlText := db.Dialect.Queue().EnqueueCheck
	if sqlText == "" {
		return WaiterTicket{}, QueueState{}, errEnqueueCheck
	}
	var t WaiterTicket
	var r checkRow
	err := db.queryRow(ctx, db.q(nil), sqlText, []any{name, owner, string(kind), timeout.Microseconds()},
		append([]any{&t.ID}, r.fields()...)...)
	if err != nil {
		return WaiterTicket{}, QueueState{}, db.Classify(err)
	}
	s := r.state()
	t.CreatedAt = s.CreatedAt
	return t, s, nil
}

// enqueueReturning runs Enqueue's statement where it returns the waiter's id
// and created_at (PostgreSQL, SQLite).
func (db *DB) enqueueReturning(ctx context.Context, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, error) {
	sqlText := db.Dialect.Queue().Enqueue
	var t WaiterTicket
	var us int64
	if err := q.QueryRowxContext(ctx, sqlText, name, owner, string(kind), timeout.Microseconds()).Scan(&t.ID, &us); err != nil {
		return WaiterTicket{}, db.Classify(err)
	}
	t.CreatedAt = Micros(us)
	return t, nil
}

// HeartbeatWaiter extends waiter id's deadline to timeout from the database's
// now. It reports false when the waiter is gone or already dead.
func (db *DB) HeartbeatWaiter(ctx context.Context, q Querier, id int64, timeout time.Duration) (ok bool, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		ok, err = db.execOne(ctx, q, db.Dialect.Queue().Heartbeat, timeout.Microseconds(), id)
		return err
	})
	return ok, err
}

// maxHeartbeatBatch bounds the ids of one HeartbeatWaiters statement.
const maxHeartbeatBatch = 500

// HeartbeatWaiters extends the deadlines of the live waiters among ids (one
// statement per 500 ids) and returns how many it extended. Dead waiters stay
// dead: each learns it from CheckWaiter.
func (db *DB) HeartbeatWaiters(ctx context.Context, q Querier, ids []int64, timeout time.Duration) (n int, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		n, err = db.heartbeatWaiters(ctx, q, ids, timeout)
		return err
	})
	return n, err
}

func (db *DB) heartbeatWaiters(ctx context.Context, q Querier, ids []int64, timeout time.Duration) (int, error) {
	total := 0
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxHeartbeatBatch)]
		ids = ids[len(batch):]
		ph := make([]string, len(batch))
		args := make([]any, 0, len(batch)+1)
		args = append(args, timeout.Microseconds())
		for i, id := range batch {
			ph[i] = db.Dialect.Placeholder(i + 2)
			args = append(args, id)
		}
		r, err := q.ExecContext(ctx, fmt.Sprintf(db.Dialect.Queue().HeartbeatMany, strings.Join(ph, ", ")), args...)
		if err != nil {
			return total, db.Classify(err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return total, err
		}
		total += int(n)
	}
	return total, nil
}

// CheckWaiter reads, in one statement, whether waiter id of name is live, how
// many live waiters are ahead of it, and the lock row.
func (db *DB) CheckWaiter(ctx context.Context, q Querier, name string, id int64) (QueueState, error) {
	var r checkRow
	err := db.queryRow(ctx, db.q(q), db.Dialect.Queue().Check, db.Dialect.checkArgs(name, id), r.fields()...)
	if err != nil {
		return QueueState{}, db.Classify(err)
	}
	return r.state(), nil
}

// checkRow holds the columns of a Check (and of EnqueueCheck after the id).
type checkRow struct {
	live, ahead, exists         int
	aheadUs, crUs, expUs, nowUs int64
	version                     int64
	owner, mode                 []byte
}

func (r *checkRow) fields() []any {
	return []any{&r.live, &r.ahead, &r.aheadUs, &r.crUs, &r.exists, &r.owner, &r.version, &r.mode, &r.expUs, &r.nowUs}
}

func (r *checkRow) state() QueueState {
	s := QueueState{Live: r.live != 0, Ahead: r.ahead}
	if r.crUs != 0 {
		s.CreatedAt = Micros(r.crUs)
	}
	if r.aheadUs != 0 {
		s.AheadExpiresAt = Micros(r.aheadUs)
	}
	s.Holder = holderFrom(r.exists != 0, r.owner, r.version, r.mode, r.expUs, r.nowUs)
	return s
}

// PeekQueue reads the number of live waiters of name and the lock row.
func (db *DB) PeekQueue(ctx context.Context, q Querier, name string) (QueueState, error) {
	var s QueueState
	var exists int
	var expUs, nowUs, version int64
	var owner, mode []byte
	err := db.queryRow(ctx, db.q(q), db.Dialect.Queue().Peek, []any{name, name},
		&s.Ahead, &exists, &owner, &version, &mode, &expUs, &nowUs)
	if err != nil {
		return QueueState{}, db.Classify(err)
	}
	s.Holder = holderFrom(exists != 0, owner, version, mode, expUs, nowUs)
	return s, nil
}

func holderFrom(exists bool, owner []byte, version int64, mode []byte, expUs, nowUs int64) Holder {
	h := Holder{Exists: exists, Owner: string(owner), Version: version, Mode: string(mode), Now: Micros(nowUs)}
	if expUs != 0 {
		h.ExpiresAt = Micros(expUs)
	}
	return h
}

// TakeWaiter deletes waiter id if it is still live. Run it in the
// transaction that takes the lock (AcquireLease on the same *sqlx.Tx): false
// means the waiter died meanwhile and the transaction must be rolled back.
func (db *DB) TakeWaiter(ctx context.Context, tx Querier, id int64) (bool, error) {
	return db.execOne(ctx, db.q(tx), db.Dialect.Queue().Take, id)
}

// TakesHeadInOne reports whether TakeHead is one statement here; where it
// is not, a waiter takes the lock with AcquireLease and TakeWaiter in one
// transaction.
func (db *DB) TakesHeadInOne() bool { return db.Dialect.Queue().TakeHead != "" }

// TakeHead takes the lock for waiter id at the head of the queue and
// deletes its row, in one statement (see QueueSQL.TakeHead): live is false
// when the waiter was dead or gone, and then nothing was taken. Where the
// take is a transaction (TakesHeadInOne false) it refuses (errTakeInTx).
func (db *DB) TakeHead(ctx context.Context, p AcquireParams, id int64) (res AcquireResult, live bool, err error) {
	query := db.Dialect.Queue().TakeHead
	if query == "" {
		return AcquireResult{}, false, errTakeInTx
	}
	r := &acquireRow{}
	if err := db.queryRow(ctx, db, query, r.bind(p, id), r.fields(&live)...); err != nil {
		return AcquireResult{}, false, db.Classify(err)
	}
	return r.result(p, false), live, nil
}

// LeaveQueue deletes waiter id, live or dead, and reports whether it was
// there. On PostgreSQL the waiters of its name are notified.
func (db *DB) LeaveQueue(ctx context.Context, q Querier, id int64) (left bool, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		left, err = db.execOne(ctx, q, db.Dialect.Queue().Leave, id)
		return err
	})
	return left, err
}
