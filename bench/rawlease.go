package main

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

const keyRawLease = "dialect"

func init() {
	register(&scenario{
		key: keyRawLease, order: 35, title: "dblock SQL only: dialect AcquireLease + ReleaseLease",
		about: "dblock's own lease statements called directly (db.AcquireLease, db.ReleaseLease), with no " +
			"Locker around them; waiters poll every 10 ms like the floor. Against the floor it prices " +
			"dblock's SQL; against the optimistic rows it prices the Go layer (options, lease handle, watchdog).",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			return &instance{
				worker: func(_ context.Context, g int) (*worker, error) {
					owner := fmt.Sprintf("raw-%s-%d", e.prefix, g)
					return &worker{
						acquire: func(ctx context.Context, name string) (releaseFunc, error) {
							p := store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: leaseTTL}
							for {
								res, err := store.Of(e.db).AcquireLease(ctx, nil, p)
								if err != nil {
									return nil, err
								}
								if res.Acquired {
									return func(ctx context.Context) error {
										ok, err := store.Of(e.db).ReleaseLease(ctx, nil, name, owner, res.Token)
										if err == nil && !ok {
											err = fmt.Errorf("release %q: not held", name)
										}
										return err
									}, nil
								}
								if err := sleepCtx(ctx, pollInterval); err != nil {
									return nil, err
								}
							}
						},
						close: func() {},
					}, nil
				},
				close: func() {},
			}, nil
		},
	})
}
