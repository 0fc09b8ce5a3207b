package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// leaseTTL is the explicit TTL of the "no renewal" variant.
const leaseTTL = 30 * time.Second

// optVariant is one optimistic scenario's set-up: try (TryAcquire with an
// explicit TTL), traced (an SDK recording telemetry), recorded (the history
// enabled), listened (a call of the same Locker waits on another name for
// the whole cell, so that its listening connection is up, as in a process
// where any call waits).
type optVariant struct{ try, traced, recorded, listened bool }

func (v optVariant) setup(ctx context.Context, e *env, contended bool) (*instance, error) {
	var cfg optimistic.Config
	if v.traced {
		cfg.Telemetry = recordingSDK()
	}
	if v.recorded {
		if err := history.Enable(ctx, e.db); err != nil {
			return nil, err
		}
	}
	l, err := optimistic.New(e.db, &cfg)
	if err != nil {
		return nil, err
	}
	stopListening := func() {}
	if v.listened {
		if stopListening, err = listenWhile(ctx, e, l); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return &instance{
		worker: func(context.Context, int) (*worker, error) { return v.worker(l, contended), nil },
		close: func() {
			stopListening()
			_ = l.Close()
			if v.recorded {
				_ = history.Disable(context.Background(), e.db)
			}
		},
	}, nil
}

func (v optVariant) worker(l *optimistic.Locker, contended bool) *worker {
	acq := l.Acquire
	var opts []dblock.Option
	if v.try {
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
	}
}

// listenWhile has a call of l wait for a name another Locker holds until
// the returned stop is called, and returns once the call waits.
func listenWhile(ctx context.Context, e *env, l *optimistic.Locker) (stop func(), err error) {
	holder, err := optimistic.New(e.db, nil)
	if err != nil {
		return nil, err
	}
	name := e.prefix + ":listened"
	held, err := holder.Acquire(ctx, name)
	if err != nil {
		_ = holder.Close()
		return nil, err
	}
	waitCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lease, err := l.Acquire(waitCtx, name); err == nil {
			_ = lease.Release(context.Background())
		}
	}()
	stop = func() {
		cancel()
		<-done
		_ = held.Release(context.Background())
		_ = holder.Close()
	}
	if err := awaitListened(ctx, e, name); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// awaitListened returns once a waiter has marked name's row as listened
// for (its call was refused and subscribed), within 10 s.
func awaitListened(ctx context.Context, e *env, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var marked bool
		err := e.db.SQL().QueryRowContext(ctx, "SELECT coalesce(listened_until > now(), false) FROM dblock_locks WHERE name = $1", name).Scan(&marked)
		switch {
		case err != nil:
			return fmt.Errorf("listened cell: the waiting call's mark: %w", err)
		case marked:
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func init() {
	register(&scenario{
		key: keyOptTry, order: 40, title: "dblock optimistic TryAcquire+Release (TTL 30s, no renewal)",
		about: "optimistic.New(db, nil); TryAcquire with dblock.WithTTL(30s), dblock.WithMaxHold(30s), so no watchdog, then Release. " +
			"Contended cells call Acquire with the same TTL (TryAcquire would fail instead of waiting).",
		setup: optVariant{try: true}.setup,
	})
	register(&scenario{
		key: keyOptAcquire, order: 50, title: "dblock optimistic Acquire+Release (defaults: 30s, renewed)",
		about: "optimistic.New(db, nil); Acquire with no options (30 s lease renewed every 10 s by a " +
			"watchdog; waiters woken by LISTEN/NOTIFY on PostgreSQL), then Release.",
		setup: optVariant{}.setup,
	})
	register(&scenario{
		key: keyOptOtel, order: 55, title: "dblock optimistic Acquire+Release, OpenTelemetry SDK installed",
		about: "opt-acquire with telemetry.Config naming an SDK meter provider (manual reader) and tracer provider " +
			"(every span sampled and kept in memory), so every metric and span is recorded.",
		setup: optVariant{traced: true}.setup,
	})
	register(&scenario{
		key: keyOptHistory, order: 56, title: "dblock optimistic Acquire+Release, history enabled",
		about: "opt-acquire with history.Enable: every release writes its entry into dblock_history, from the trigger.",
		kinds: []store.Kind{store.Postgres, store.MySQL}, resetTables: []string{"dblock_history"},
		setup: optVariant{recorded: true}.setup,
	})
	register(&scenario{
		key: keyOptListened, order: 57, title: "dblock optimistic Acquire+Release, the Locker listening",
		about: "opt-acquire while another call of the same Locker waits for a name held elsewhere for the whole cell, " +
			"so that the Locker's listening connection (PostgreSQL) is up, as in a process where any call waits.",
		kinds: []store.Kind{store.Postgres},
		setup: optVariant{listened: true}.setup,
	})
}
