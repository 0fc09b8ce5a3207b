package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// MySQL's and MariaDB's session engine: sessions are connections, known by
// CONNECTION_ID() on one @@server_id, and ended with KILL; the server's run
// is learned from its Uptime status.

// serverIncarnation: two round trips, the Uptime status, then the server id
// and the clock.
func (mysqlDialect) serverIncarnation(ctx context.Context, db *DB, q Querier) (Incarnation, error) {
	var inc Incarnation
	// Uptime is the whole seconds between the server's start and the
	// statement's start, both truncated to the second; read the clock
	// after it, so that the clock's second, less Uptime, plus one
	// second, is at or after the start.
	var name string
	var uptime int64
	if err := q.QueryRowxContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &uptime); err != nil {
		return inc, db.Classify(err)
	}
	var nowUs int64
	if err := q.QueryRowxContext(ctx, `SELECT @@server_id, `+myUs("UTC_TIMESTAMP(6)")).Scan(&inc.Server, &nowUs); err != nil {
		return inc, db.Classify(err)
	}
	inc.Learned = Micros(nowUs)
	inc.Started = inc.Learned.Truncate(time.Second).Add(time.Duration(1-uptime) * time.Second)
	return inc, nil
}

// sessionsAlive takes a session listed under its id for alive.
func (d mysqlDialect) sessionsAlive(ctx context.Context, db *DB, q Querier, refs []SessionRef) ([]bool, error) {
	listed := make(map[int64]bool, len(refs))
	err := d.scanSessions(ctx, db, q, refs, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		listed[id] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	alive := make([]bool, len(refs))
	for i, r := range refs {
		alive[i] = listed[r.ID]
	}
	return alive, nil
}

func (d mysqlDialect) sessionID(ctx context.Context, db *DB, q Querier) (int64, error) {
	return d.querySessionID(ctx, db, q, "SELECT CONNECTION_ID()")
}

func (mysqlDialect) cancelStatement(ctx context.Context, db *DB, q Querier, id int64) error {
	_, err := q.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id))
	return db.Classify(err)
}

// sessionFromPort: the processlist's Host is "host:port" for a TCP client.
func (mysqlDialect) sessionFromPort(ctx context.Context, db *DB, q Querier, id int64, port int) (bool, error) {
	var found bool
	err := q.QueryRowxContext(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = ? AND HOST LIKE CONCAT('%:', ?))", id, port).Scan(&found)
	return found, db.Classify(err)
}

// killSession: an unknown thread id (1094) is a session gone already.
func (mysqlDialect) killSession(ctx context.Context, db *DB, q Querier, id int64) error {
	_, err := q.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	if mysqlError(err, 1094) { // Unknown thread id: gone already.
		err = nil
	}
	return db.Classify(err)
}
