package store

// PreparedCount is how many statements db holds prepared (see prepared.go).
func PreparedCount(db *DB) int {
	p := db.prepared
	if p == nil {
		return 0
	}
	n := 0
	for _, e := range p.m {
		if e.st.Load() != nil {
			n++
		}
	}
	return n
}

// PrepareAgain lets every statement of db that failed to prepare be
// prepared again at its next use.
func PrepareAgain(db *DB) {
	for _, e := range db.prepared.m {
		e.failed.Store(0)
	}
}

// NoteReleased records name as released lately by db (see takefree.go).
func (db *DB) NoteReleased(name string) { db.noteReleased(name) }

// TakesFree reports whether db's next acquisition of name tries TakeFree
// first (on the pool; on MariaDB, no trigger seen lately: see
// mysqlDialect.takeFree).
func TakesFree(db *DB, name string) bool {
	return db.takesFree(db.DB, AcquireParams{Name: name}) && !(db.MariaDB() && db.returningAcquire())
}

// TakesFreeRead reports whether db's next read of name tries
// SharedSQL.TakeFree first (see shared_take.go).
func TakesFreeRead(db *DB, name string) bool { return db.takesFreeRead(name) }

// JoinsRead reports whether db's next read of name tries SharedSQL.Join
// first (see shared_take.go).
func JoinsRead(db *DB, name string) bool { return db.joinsRead(name) }
