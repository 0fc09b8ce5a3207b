package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// The hand-written hand-off across processes: the reference of the
// cross-process cell's throughput, the best a lease can do across
// processes with the statements a user would write. It runs the same
// processes and goroutines on its own name, in an easier job than
// dblock's: the members are known in advance and take turns (member m
// takes when the row's version, which counts the takes, is m modulo the
// member count), so no waiter ever races another or reserves anything.
// Each take is one durable statement, each release one statement committed
// asynchronously, as dblock's. On PostgreSQL the release notifies the
// version it leaves, and each process has one listening connection that
// wakes the member whose turn it is; MySQL and MariaDB have no
// notifications, so the member whose turn comes polls (handoffPoll).

const (
	// handoffPoll is how often the member whose turn it is polls on MySQL
	// and MariaDB; a member k turns away sleeps k of it. handoffLook is
	// how long a member waits for its wake-up on PostgreSQL before it
	// looks by itself.
	handoffPoll = time.Millisecond
	handoffLook = 50 * time.Millisecond
	// handoffChannel is the channel of the PostgreSQL reference's releases.
	handoffChannel = "dblock_bench_handoff"
)

const (
	pgHandoffTake = `UPDATE dblock_locks SET owner = $2, reentry = 1, version = version + 1,
    expires_at = now() + $3::bigint * interval '1 microsecond', updated_at = now()
WHERE name = $1 AND (owner IS NULL OR expires_at <= now()) AND version % $4 = $5
RETURNING version`
	pgHandoffRelease = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE name = $1 AND owner = $2 AND version = $3
RETURNING pg_notify('` + handoffChannel + `', version::text)`

	myHandoffTake = `UPDATE dblock_locks SET owner = ?, reentry = 1, version = LAST_INSERT_ID(version + 1),
    expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND (owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND MOD(version, ?) = ?`
)

// handoffRow creates the reference's row, free, at version 0.
func handoffRow(ctx context.Context, e *env, name string) error {
	q := `INSERT INTO dblock_locks (name, owner, reentry, version, updated_at) VALUES ($1, NULL, 0, 0, now())`
	if store.Of(e.db).Dialect.Kind() == store.MySQL {
		q = `INSERT INTO dblock_locks (name, owner, reentry, version, updated_at) VALUES (?, NULL, 0, 0, UTC_TIMESTAMP(6))`
	}
	_, err := e.db.SQL().ExecContext(ctx, q, name)
	return err
}

// handoffChild is one process of the reference: members j.Index*j.Goroutines
// and on, of j.Members.
type handoffChild struct {
	j     childJob
	db    *dialect.DB
	pg    bool
	wakes []chan struct{} // per local member, where releases are announced
}

// runHandoffChild runs j's members until the cell ends.
func runHandoffChild(j childJob) childResult {
	ctx := context.Background()
	db, err := dialect.Open(ctx, j.DSN)
	if err != nil {
		return childResult{Err: err.Error()}
	}
	defer db.Close()
	h := &handoffChild{j: j, db: db, pg: store.Of(db).Dialect.Kind() == store.Postgres}
	for range j.Goroutines {
		h.wakes = append(h.wakes, make(chan struct{}, 1))
	}
	end := j.Start.Add(j.Duration)
	if h.pg {
		stop, err := h.listen(ctx, end)
		if err != nil {
			return childResult{Err: err.Error()}
		}
		defer stop()
	}
	time.Sleep(time.Until(j.begin()))
	return h.run(ctx, end)
}

// listen wakes, on each release announced, the local member whose turn
// it is, until end.
func (h *handoffChild) listen(ctx context.Context, end time.Time) (stop func(), err error) {
	conn, err := pgx.Connect(ctx, h.j.PgURL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+handoffChannel); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	lctx, cancel := context.WithDeadline(ctx, end.Add(time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil {
				return
			}
			var version int
			if _, err := fmt.Sscan(n.Payload, &version); err != nil {
				continue
			}
			if local := version%h.j.Members - h.j.Index*h.j.Goroutines; local >= 0 && local < h.j.Goroutines {
				select {
				case h.wakes[local] <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	}, nil
}

// run runs the members and gathers their counts and waits.
func (h *handoffChild) run(ctx context.Context, end time.Time) childResult {
	var (
		mu  sync.Mutex
		res = childResult{Counts: make([]int, h.j.Goroutines)}
		wg  sync.WaitGroup
	)
	for g := range h.j.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			member := h.j.Index*h.j.Goroutines + g
			owner := fmt.Sprintf("handoff-%d", member)
			for time.Now().Before(end) {
				t0 := time.Now()
				version, err := h.take(ctx, g, member, owner, end)
				if err == nil {
					err = h.release(ctx, owner, version)
				}
				mu.Lock()
				if err != nil {
					if !errors.Is(err, errCellOver) {
						res.Err = err.Error()
					}
					mu.Unlock()
					return
				}
				if !h.j.measured(t0) {
					mu.Unlock()
					continue
				}
				res.Counts[g]++
				res.Waits = append(res.Waits, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}

// errCellOver ends a member whose turn did not come before the cell ended.
var errCellOver = errors.New("cell over")

// take takes the name at member's turn: tries, and waits for the wake-up
// (PostgreSQL) or polls (MySQL, MariaDB) between tries.
func (h *handoffChild) take(ctx context.Context, g, member int, owner string, end time.Time) (int64, error) {
	for {
		version, ok, err := h.try(ctx, member, owner)
		if ok || err != nil {
			return version, err
		}
		if time.Now().After(end) {
			return 0, errCellOver
		}
		if !h.pg {
			if err := h.pollWait(ctx, member); err != nil {
				return 0, err
			}
			continue
		}
		select {
		case <-h.wakes[g]:
		case <-time.After(handoffLook):
		}
	}
}

// pollWait sleeps a poll per turn between the row's version and member's
// turn (one when it is the member's turn and the name held).
func (h *handoffChild) pollWait(ctx context.Context, member int) error {
	var version int
	if err := h.db.SQL().QueryRowContext(ctx, "SELECT version FROM dblock_locks WHERE name = ?", h.j.Name).Scan(&version); err != nil {
		return err
	}
	turns := (member - version%h.j.Members + h.j.Members) % h.j.Members
	time.Sleep(handoffPoll * time.Duration(max(turns, 1)))
	return nil
}

// try runs the take once; ok false: not this member's turn, or held.
func (h *handoffChild) try(ctx context.Context, member int, owner string) (version int64, ok bool, err error) {
	if h.pg {
		err = h.db.SQL().QueryRowContext(ctx, pgHandoffTake, h.j.Name, owner, ttlMicros, h.j.Members, member).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return version, err == nil, err
	}
	r, err := h.db.SQL().ExecContext(ctx, myHandoffTake, owner, ttlMicros, h.j.Name, h.j.Members, member)
	if err != nil {
		return 0, false, err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return 0, false, err
	}
	version, err = r.LastInsertId()
	return version, err == nil, err
}

// release frees the name: the floor's release committed asynchronously,
// announcing the version on PostgreSQL.
func (h *handoffChild) release(ctx context.Context, owner string, version int64) error {
	if h.pg {
		var ignored string
		return h.db.SQL().QueryRowContext(ctx, pgHandoffRelease, h.j.Name, owner, version).Scan(&ignored)
	}
	return floorExec(ctx, h.db, myFloorRelease, h.j.Name, owner, version)
}
