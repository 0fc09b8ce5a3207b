package store

import (
	"context"
	"errors"
	"time"

	"github.com/dblock-go/dblock"
)

// The cheaper acquisition of a free name (LeaseSQL.TakeFree, PostgreSQL and
// MariaDB): tried first for a name this DB released lately, where the name
// is most likely free and its row there (an application that takes and
// gives back the same name, a Locker's waiters handing a name on); Acquire
// follows when it took nothing, and the name is forgotten, so a name held
// elsewhere costs the extra statement once. Each engine runs it in its
// <db>_takefree.go.

// freeFor is how long after this DB released a name its next acquisition
// tries TakeFree first.
const freeFor = 5 * time.Second

// noteReleased records a lease's release where TakeFree is in use.
func (db *DB) noteReleased(name string) {
	if db.Dialect.Lease().TakeFree != "" {
		db.free.Mark(name)
	}
}

// freeTake is what an engine's takeFree did.
type freeTake uint8

const (
	takeSkipped freeTake = iota // Not tried: nothing was sent.
	takeMissed                  // Tried, took nothing: Acquire decides.
	takeTaken                   // Took the name: the result is a lease.
)

// acquireFreeFirst is AcquireLease (on the pool) for a name released
// lately: TakeFree first, then, where it took nothing, the dialect's
// acquisition, the name forgotten and the take's statement counted.
func (db *DB) acquireFreeFirst(ctx context.Context, q Querier, p AcquireParams) (AcquireResult, error) {
	res, took, err := db.Dialect.takeFree(ctx, db, p)
	if err != nil || took == takeTaken {
		return res, err
	}
	if took == takeMissed {
		db.free.Forget(p.Name)
	}
	res, err = db.Dialect.acquireLease(ctx, db, q, p)
	if took == takeMissed {
		res.Statements = max(res.Statements, 1) + 1
	}
	return res, err
}

// takesFree reports whether the acquisition p on q tries TakeFree before
// Acquire: where the dialect has it, on the pool (autocommit), for a name
// this DB released lately or that its caller saw free (p.FreeSeen).
func (db *DB) takesFree(q Querier, p AcquireParams) bool {
	return db.Dialect.Lease().TakeFree != "" && db.onPool(q) && (p.FreeSeen || db.free.Within(p.Name, freeFor))
}

// notBusy is err, or nil where it says a row was busy (locked past the
// statement's wait, or a deadlock's victim): a plain statement that met
// one did nothing, and the procedure decides.
func notBusy(err error) error {
	if errors.Is(err, dblock.ErrNotAcquired) || errors.Is(err, dblock.ErrDeadlock) {
		return nil
	}
	return err
}

// execID runs an update on the pool and reads its OK packet (MariaDB's
// takes): the rows it affected and, where one was, the insert id.
func (db *DB) execID(ctx context.Context, query string, args ...any) (affected, id int64, err error) {
	r, err := db.exec(ctx, db, query, args...)
	if err == nil {
		affected, err = r.RowsAffected()
	}
	if err == nil && affected == 1 {
		id, err = r.LastInsertId()
	}
	return affected, id, err
}
