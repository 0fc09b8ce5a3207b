package store

import (
	"context"

	"github.com/dblock-go/dblock"
)

// MariaDB's take of a free name (LeaseSQL.TakeFree, see takefree.go).

// takeFree runs TakeFree on the pool, except while a trigger was seen
// lately (one zeroes the insert id on an update: the upsert's RETURNING
// form reads the row in one statement, where the take would need a second).
// MySQL 8 has no TakeFree and never gets here (DB.takesFree).
func (mysqlDialect) takeFree(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, freeTake, error) {
	if db.returningAcquire() {
		return AcquireResult{}, takeSkipped, nil
	}
	a := &mysqlAcquisition{ctx: ctx, db: db, q: db, p: p}
	return a.takeFree()
}

// takeFree runs TakeFree once: a lease (or, when a trigger hid its token,
// a take to read back, as ownedToken does), or nothing taken (held,
// reserved for another owner, a transaction holding the row: Acquire tells
// who). Only errors that are not a busy row end the acquisition.
func (a *mysqlAcquisition) takeFree() (AcquireResult, freeTake, error) {
	p := a.p
	owner := any(p.Owner) // Boxed once for its four places.
	affected, id, err := a.db.execID(a.ctx, a.db.Dialect.Lease().TakeFree,
		modeArg(p.Mode), nullString(p.Metadata), ttlArg(p.TTL), owner, owner, owner, p.Name, owner)
	switch {
	case err != nil:
		return AcquireResult{}, takeMissed, notBusy(a.db.Classify(err))
	case affected != 1:
		return AcquireResult{}, takeMissed, nil
	case id == 0:
		res, err := a.ownedToken()
		return res, takeTaken, err
	}
	return AcquireResult{Acquired: true, Token: dblock.Token(id), Reentry: 1, Statements: 1}, takeTaken, nil
}
