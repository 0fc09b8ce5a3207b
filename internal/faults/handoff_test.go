package faults

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// TestFaultHandOffAnswerLost: a release hands the name to its Locker's
// waiter in its own statement (fair everywhere it can; optimistic on
// PostgreSQL), the statement commits on the server, and its answer is lost
// (every proxied connection cut). The releasing call must not say the
// lease was lost or not held, the waiter must read the hand-off back and
// return the lease it was handed (not wait again behind it), and once that
// lease is released the name is free at once.
func TestFaultHandOffAnswerLost(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind)+"/fair", func(t *testing.T) {
			t.Parallel()
			handOffAnswerLost(t, kind, func(t *testing.T, db *dialect.DB) (dblock.Locker, func(context.Context, string)) {
				// The head of the queue sleeps seconds between its looks,
				// so that the release finds it asleep and hands it the name.
				l, err := fairqueue.New(db, &fairqueue.Config{Logger: quiet, DisableNotify: true,
					PollMin: 5 * time.Second, HeadPollMax: 10 * time.Second, PollMax: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return l, func(ctx context.Context, name string) { waitQueued(ctx, t, l, name) }
			})
		})
	}
	t.Run("postgres/optimistic", func(t *testing.T) {
		t.Parallel()
		handOffAnswerLost(t, store.Postgres, func(t *testing.T, db *dialect.DB) (dblock.Locker, func(context.Context, string)) {
			l, err := optimistic.New(db, &optimistic.Config{Logger: quiet, DisableNotify: true,
				PollMin: 5 * time.Second, PollMax: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return l, func(context.Context, string) {}
		})
	})
}

// handOffAnswerLost is TestFaultHandOffAnswerLost on kind, with the Locker
// newLocker opens on the proxied pool and the wait until its waiter of a
// name is in line.
func handOffAnswerLost(t *testing.T, kind store.Kind, newLocker func(*testing.T, *dialect.DB) (dblock.Locker, func(context.Context, string))) {
	iso := dbtest.New(t, kind)
	px := newProxy(t, iso)
	client, waitInLine := newLocker(t, px.open(t))
	defer client.Close()
	const name, ttl = "handoff-lost", 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := client.Acquire(ctx, name, dblock.WithOwner("a"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dblock.Lease, 1)
	go func() {
		lease, err := client.Acquire(ctx, name, dblock.WithOwner("b"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		got <- lease
	}()
	waitInLine(ctx, name)
	time.Sleep(300 * time.Millisecond) // Its first look done: asleep.
	var handedAt time.Time
	handed := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err == nil && h.Owner == "b" && handedAt.IsZero() {
			handedAt = time.Now()
		}
		return err == nil && h.Owner == "b"
	}
	var releasedAt atomic.Int64
	relErr := cutWhile(t, px, handed, func(ctx context.Context) error {
		err := held.Release(ctx)
		releasedAt.Store(time.Now().UnixNano())
		return err
	})
	t.Logf("release across the lost answer: %v", relErr)
	if at := time.Unix(0, releasedAt.Load()); at.Before(handedAt) {
		t.Fatalf("the release returned %v before the name was the waiter's: it released, and did not hand over", handedAt.Sub(at))
	}
	if errors.Is(relErr, dblock.ErrNotHeld) || errors.Is(relErr, dblock.ErrLost) ||
		relErr != nil && !errors.Is(relErr, dblock.ErrUnavailable) {
		t.Errorf("Release whose hand-off's answer was lost = %v, want nil or an error wrapping ErrUnavailable", relErr)
	}
	var lease *dblock.Lease
	select {
	case lease = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not return 20 s after the hand-off")
	}
	if lease == nil {
		return
	}
	if lease.Owner() != "b" || lease.Token() <= held.Token() || lease.Reentry() != 1 {
		t.Fatalf("the waiter's lease: owner %q, token %d (the holder's %d), reentry %d", lease.Owner(), lease.Token(), held.Token(), lease.Reentry())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("the waiter's release: %v", err)
	}
	phantomCheck(t, iso, name, ttl, 3*time.Second, "the release of a lease handed over across a lost answer")
}

// waitQueued waits until name's queue has a waiter.
func waitQueued(ctx context.Context, t *testing.T, l *fairqueue.Locker, name string) {
	t.Helper()
	for {
		q, err := l.Queue(ctx, name)
		if err != nil {
			t.Fatalf("queue: %v", err)
		}
		if len(q) > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
