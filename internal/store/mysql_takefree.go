package store

import (
	"errors"

	"github.com/dblock-go/dblock"
)

// MariaDB's take of a free name (LeaseSQL.TakeFree, see takefree.go).

// takesFree reports whether a tries TakeFree before Acquire: where
// DB.takesFree says so, with no trigger seen lately (one zeroes the insert
// id on an update: the upsert's RETURNING form reads the row instead).
func (a *mysqlAcquisition) takesFree() bool {
	return a.db.takesFree(a.q, a.p.Name) && !a.db.returningAcquire()
}

// takeFree runs TakeFree once: taken reports a lease (or, when a trigger
// hid its token, a take to read back, as ownedToken does); not taken, the
// name is forgotten and Acquire decides. Only errors that are not a busy
// row end the acquisition.
func (a *mysqlAcquisition) takeFree() (res AcquireResult, taken bool, err error) {
	p := a.p
	owner := any(p.Owner) // Boxed once for its four places.
	r, err := a.db.exec(a.ctx, a.q, a.db.Dialect.Lease().TakeFree,
		modeArg(p.Mode), nullString(p.Metadata), ttlArg(p.TTL), owner, owner, owner, p.Name, owner)
	var affected, id int64
	if err == nil {
		affected, err = r.RowsAffected()
	}
	if err == nil && affected == 1 {
		id, err = r.LastInsertId()
	}
	switch {
	case err != nil:
		err = a.db.Classify(err)
		if errors.Is(err, dblock.ErrNotAcquired) || errors.Is(err, dblock.ErrDeadlock) {
			// A transaction holds the row: Acquire tells who.
			a.db.free.Forget(p.Name)
			return AcquireResult{}, false, nil
		}
		return AcquireResult{}, false, err
	case affected != 1:
		a.db.free.Forget(p.Name)
		return AcquireResult{}, false, nil
	case id == 0:
		res, err = a.ownedToken()
		return res, true, err
	}
	return AcquireResult{Acquired: true, Token: dblock.Token(id), Reentry: 1, Statements: 1}, true, nil
}
