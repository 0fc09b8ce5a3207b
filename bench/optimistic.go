package main

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// leaseTTL is the explicit TTL of the "no renewal" variant.
const leaseTTL = 30 * time.Second

func init() {
	open := func(try, traced, recorded bool) func(context.Context, *env, bool) (*instance, error) {
		return func(ctx context.Context, e *env, contended bool) (*instance, error) {
			var cfg optimistic.Config
			if traced {
				cfg.Telemetry = recordingSDK()
			}
			if recorded {
				if err := history.Enable(ctx, e.db); err != nil {
					return nil, err
				}
			}
			l, err := optimistic.New(e.db, &cfg)
			if err != nil {
				return nil, err
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					acq := l.Acquire
					var opts []dblock.Option
					if try {
						opts = []dblock.Option{dblock.WithTTL(leaseTTL), dblock.WithMaxHold(leaseTTL)}
						if !contended {
							acq = l.TryAcquire // contended cells wait: Acquire with the same TTL
						}
					}
					return &worker{
						acquire: func(ctx context.Context, name string) (releaseFunc, error) {
							lease, err := acq(ctx, name, opts...)
							if err != nil {
								return nil, err
							}
							return lease.Release, nil
						},
						close: func() {},
					}, nil
				},
				close: func() {
					_ = l.Close()
					if recorded {
						_ = history.Disable(context.Background(), e.db)
					}
				},
			}, nil
		}
	}
	register(&scenario{
		key: keyOptTry, order: 40, title: "dblock optimistic TryAcquire+Release (TTL 30s, no renewal)",
		about: "optimistic.New(db, nil); TryAcquire with dblock.WithTTL(30s), dblock.WithMaxHold(30s), so no watchdog, then Release. " +
			"Contended cells call Acquire with the same TTL (TryAcquire would fail instead of waiting).",
		setup: open(true, false, false),
	})
	register(&scenario{
		key: keyOptAcquire, order: 50, title: "dblock optimistic Acquire+Release (defaults: 30s, renewed)",
		about: "optimistic.New(db, nil); Acquire with no options (30 s lease renewed every 10 s by a " +
			"watchdog; waiters woken by LISTEN/NOTIFY on PostgreSQL), then Release.",
		setup: open(false, false, false),
	})
	register(&scenario{
		key: keyOptOtel, order: 55, title: "dblock optimistic Acquire+Release, OpenTelemetry SDK installed",
		about: "opt-acquire with telemetry.Config naming an SDK meter provider (manual reader) and tracer provider " +
			"(every span sampled and kept in memory), so every metric and span is recorded.",
		setup: open(false, true, false),
	})
	register(&scenario{
		key: keyOptHistory, order: 56, title: "dblock optimistic Acquire+Release, history enabled",
		about: "opt-acquire with history.Enable: every release writes its entry into dblock_history, from the trigger.",
		kinds: []store.Kind{store.Postgres, store.MySQL}, resetTables: []string{"dblock_history"},
		setup: open(false, false, true),
	})
}
