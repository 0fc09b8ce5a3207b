package faults

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/semaphore"
)

// TestFaultGrantAnswerLost: a semaphore's grant commits on the server and
// its answer is lost (every proxied connection cut). The call must read the
// grant back by its request and return its lease (TryAcquire and Acquire
// alike), so that exactly one grant is out, the lease's, and once released
// the whole limit is free at once, not after the grant's TTL.
func TestFaultGrantAnswerLost(t *testing.T) {
	for _, kind := range serverKinds() {
		for _, wait := range []bool{false, true} {
			sub := "try"
			if wait {
				sub = "wait"
			}
			t.Run(string(kind)+"/"+sub, func(t *testing.T) {
				t.Parallel()
				grantAnswerLost(t, wait, dbtest.New(t, kind))
			})
		}
	}
}

func grantAnswerLost(t *testing.T, wait bool, iso *dbtest.Isolated) {
	px := newProxy(t, iso)
	client, err := semaphore.New(px.open(t), &semaphore.Config{Logger: quiet, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const name, limit, ttl = "grant-lost", 2, 30 * time.Second
	granted := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := iso.Store().SemaphoreOf(ctx, name)
		return err == nil && st.Used > 0
	}
	acquire := client.TryAcquire
	if wait {
		acquire = client.Acquire
	}
	// A grant and its release first, so that a pooled connection carries
	// the lost one: on MySQL the grant is a transaction of five statements,
	// each of whose answers the proxy delays a second.
	warm, err := acquire(context.Background(), name, limit, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lease *dblock.Lease
	err = cutWhile(t, px, granted, func(ctx context.Context) (err error) {
		lease, err = acquire(ctx, name, limit, 1, dblock.WithOwner("g"), dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
		return err
	})
	if err != nil {
		t.Fatalf("acquire whose grant's answer was lost = %v, want the lease of its grant", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	grants, err := iso.Store().ListPermits(ctx, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 1 || dblock.Token(grants[0].ID) != lease.Token() || grants[0].Owner != "g" {
		t.Fatalf("grants out %+v, want one: the lease's (token %d, owner g)", grants, lease.Token())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	direct, err := semaphore.New(iso.DB, &semaphore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	all, err := direct.TryAcquire(ctx, name, limit, limit)
	if err != nil {
		t.Fatalf("the whole limit after the release: %v (a grant left out until its TTL)", err)
	}
	if err := all.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
