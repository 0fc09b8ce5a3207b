package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/dblock-go/dblock/pessimistic"
)

func init() {
	register(&scenario{
		key: keyPessimist, order: 60, title: "dblock pessimistic Do (callback, empty fn)",
		about: "pessimistic.New(db, nil); Do(ctx, name, fn) with an fn that does nothing: the lock is " +
			"taken, fn runs in the locking transaction, and the commit releases. The hold is timed from " +
			"fn's start to fn's return, so hand-off and wait figures mean the same as for the others.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			l, err := pessimistic.New(e.db, nil)
			if err != nil {
				return nil, err
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					w := &worker{close: func() {}}
					var held, releasing time.Time
					fn := func(context.Context, *sql.Tx) error {
						held = time.Now()
						releasing = held
						return nil
					}
					w.acquire = func(ctx context.Context, name string) (releaseFunc, error) {
						if err := l.Do(ctx, name, fn); err != nil {
							return nil, err
						}
						return noRelease, nil
					}
					w.holdTimes = func() (time.Time, time.Time) { return held, releasing }
					return w, nil
				},
				close: func() { _ = l.Close() },
			}, nil
		},
	})
}

func noRelease(context.Context) error { return nil }
