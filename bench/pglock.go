package main

import (
	"context"
	"database/sql"
	"fmt"

	"cirello.io/pglock"
	_ "github.com/lib/pq" // pglock.New accepts only lib/pq.

	"github.com/dblock-go/dblock/internal/store"
)

func init() {
	register(&scenario{
		key: keyPglock, order: 80, title: "peer: cirello.io/pglock v1.16.1 (defaults)",
		about: "cirello.io/pglock v1.16.1 with its default options (20 s lease, 5 s heartbeat, waiters " +
			"sleep one lease between tries) on lib/pq, in its own table made by CreateTable. " +
			"Acquire = nextval + upsert; Release = DELETE.",
		kinds:       []store.Kind{store.Postgres},
		resetTables: []string{"locks"},
		setup: func(ctx context.Context, e *env, _ bool) (*instance, error) {
			// Two pools of 64 idle connections would crowd a server with
			// max_connections=100: dblock's pool keeps none while pglock runs.
			e.db.SQL().SetMaxIdleConns(0)
			db, err := sql.Open("postgres", e.pgURL)
			if err != nil {
				e.db.SQL().SetMaxIdleConns(64)
				return nil, err
			}
			db.SetMaxIdleConns(64)
			c, err := pglock.New(db)
			if err != nil {
				_ = db.Close() // pglock closes it itself only for some errors; a second Close is harmless
				e.db.SQL().SetMaxIdleConns(64)
				return nil, err
			}
			if err := c.TryCreateTable(); err != nil {
				_ = db.Close()
				e.db.SQL().SetMaxIdleConns(64)
				return nil, fmt.Errorf("pglock create table: %w", err)
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					return &worker{
						acquire: func(ctx context.Context, name string) (releaseFunc, error) {
							l, err := c.AcquireContext(ctx, name)
							if err != nil {
								return nil, err
							}
							return func(ctx context.Context) error { return c.ReleaseContext(ctx, l) }, nil
						},
						close: func() {},
					}, nil
				},
				close: func() { _ = db.Close(); e.db.SQL().SetMaxIdleConns(64) },
			}, nil
		},
	})
}
