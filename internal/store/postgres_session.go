package store

import (
	"context"
	"database/sql"
)

// PostgreSQL's session engine: sessions are backends, known by their pid
// and, while they hold a lock, by their transaction's start; the server's
// run is known by pg_postmaster_start_time().

func (postgres) serverIncarnation(ctx context.Context, db *DB, q Querier) (Incarnation, error) {
	var inc Incarnation
	var startUs, nowUs int64
	err := q.QueryRowxContext(ctx, `SELECT `+pgUs("pg_postmaster_start_time()")+`, `+pgUs("clock_timestamp()")).Scan(&startUs, &nowUs)
	if err != nil {
		return inc, db.Classify(err)
	}
	inc.Started, inc.Learned = Micros(startUs), Micros(nowUs)
	return inc, nil
}

// sessionsAlive reads each session's transaction start and state, and takes
// a session for the locking one while it is in that transaction (or its
// transaction is hidden).
func (d postgres) sessionsAlive(ctx context.Context, db *DB, q Querier, refs []SessionRef) ([]bool, error) {
	type found struct {
		txUs  int64
		state string
	}
	sessions := make(map[int64]found, len(refs))
	err := d.scanSessions(ctx, db, q, refs, func(rows *sql.Rows) error {
		var (
			id int64
			f  found
		)
		if err := rows.Scan(&id, &f.txUs, &f.state); err != nil {
			return err
		}
		sessions[id] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	alive := make([]bool, len(refs))
	for i, r := range refs {
		f, ok := sessions[r.ID]
		switch {
		case !ok:
		case f.txUs != 0:
			// The session is in a transaction: the locking one?
			alive[i] = f.txUs == r.TxStart.UnixMicro()
		default:
			// xact_start hidden (another role's session, or
			// track_activities off: state is then NULL or 'disabled'),
			// or the session is in no transaction at all ('idle').
			alive[i] = f.state != "idle"
		}
	}
	return alive, nil
}

func (d postgres) sessionID(ctx context.Context, db *DB, q Querier) (int64, error) {
	return d.querySessionID(ctx, db, q, "SELECT pg_backend_pid()")
}

func (postgres) cancelStatement(ctx context.Context, db *DB, q Querier, id int64) error {
	_, err := q.ExecContext(ctx, "SELECT pg_cancel_backend($1)", id)
	return db.Classify(err)
}

func (postgres) sessionFromPort(ctx context.Context, db *DB, q Querier, id int64, port int) (bool, error) {
	var found bool
	err := q.QueryRowxContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND client_port = $2)", id, port).Scan(&found)
	return found, db.Classify(err)
}

func (postgres) killSession(ctx context.Context, db *DB, q Querier, id int64) error {
	_, err := q.ExecContext(ctx, "SELECT pg_terminate_backend($1)", id)
	return db.Classify(err)
}
