package main

import (
	"context"

	"github.com/dblock-go/dblock/fairqueue"
)

func init() {
	register(&scenario{
		key: keyFair, order: 70, title: "dblock fair Acquire+Release",
		about: "fairqueue.New(db, nil); Acquire with no options (join the wait queue, take the name when " +
			"first in line and free), then Release.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			l, err := fairqueue.New(e.db, nil)
			if err != nil {
				return nil, err
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					return &worker{
						acquire: func(ctx context.Context, name string) (releaseFunc, error) {
							lease, err := l.Acquire(ctx, name)
							if err != nil {
								return nil, err
							}
							return lease.Release, nil
						},
						close: func() {},
					}, nil
				},
				close: func() { _ = l.Close() },
			}, nil
		},
	})
}
