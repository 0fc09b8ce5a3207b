package main

import (
	"context"

	"github.com/dblock-go/dblock/fairqueue"
)

func init() {
	register(&scenario{
		key: keyFair, order: 70, title: "dblock fair Acquire+Release",
		about: "fairqueue.New(db, nil); Acquire with no options (join the wait queue, take the name when " +
			"first in line and free), then Release. Each waiter's place is read from the queue " +
			"(WithPositionFunc), so FIFO is checked in the queue's order.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			l, err := fairqueue.New(e.db, nil)
			if err != nil {
				return nil, err
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					return newFairWorker(l), nil
				},
				close: func() { _ = l.Close() },
			}, nil
		},
	})
}

// fairWorker is one goroutine's fair client: it remembers its last grant's
// token and when it (last) joined the queue.
type fairWorker struct {
	l             *fairqueue.Locker
	token, joined int64
	// ctx is the last caller's context with the position observer, made
	// once per caller context rather than once per acquisition.
	base, ctx context.Context
}

func newFairWorker(l *fairqueue.Locker) *worker {
	f := &fairWorker{l: l}
	return &worker{acquire: f.acquire, close: func() {}, queued: func() (int64, int64) { return f.token, f.joined }}
}

func (f *fairWorker) acquire(ctx context.Context, name string) (releaseFunc, error) {
	if ctx != f.base {
		f.base = ctx
		f.ctx = fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) {
			f.joined = p.Joined.UnixMicro() // the latest place: a waiter that lost its place queued again
		})
	}
	f.joined = 0
	lease, err := f.l.Acquire(f.ctx, name)
	if err != nil {
		return nil, err
	}
	f.token = int64(lease.Token())
	return lease.Release, nil
}
