package store

import (
	"context"
	"database/sql"
	"time"
)

// sessionEndPoll bounds the pause between two looks of AwaitSessionEnd.
const sessionEndPoll = 20 * time.Millisecond

// AwaitSessionEnd returns once the server, asked on q (nil: the pool), no
// longer lists a session under id: one ended with KillSession, or whose
// connection its driver closed. A server ends a session's transaction
// (its locks, and any lock wait) before it stops listing the session
// (PostgreSQL aborts it before its backend leaves pg_stat_activity;
// MySQL and MariaDB roll back a connection's transaction before its
// thread leaves the processlist), so after this the session can no longer
// be granted a lock. It looks at once, then after 1 ms, doubling up to
// sessionEndPoll, until ctx ends (its error, classified). SQLite has no
// sessions: nil at once.
func (db *DB) AwaitSessionEnd(ctx context.Context, q Querier, id int64) error {
	if !db.Dialect.Caps().RowLocks {
		return nil
	}
	q = db.q(q)
	pause := time.Millisecond
	for {
		listed, err := db.sessionListed(ctx, q, id)
		if err != nil || !listed {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return db.Classify(ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, sessionEndPoll)
	}
}

// sessionListed reports whether the server lists a session under id (the
// Alive statement returns a row for it).
func (db *DB) sessionListed(ctx context.Context, q Querier, id int64) (bool, error) {
	listed := false
	err := server{}.scanSessions(ctx, db, q, []SessionRef{{ID: id}}, func(*sql.Rows) error {
		listed = true
		return nil
	})
	return listed, err
}
