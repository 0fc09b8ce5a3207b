package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
)

// TestFaultReadBackHangs: an acquire commits on the server, its answer is
// lost (every proxied connection cut), and for the next 1.2 s the network
// drops everything, so the first read of the row hangs on its new
// connection. The read-back is tried again, each try bounded by a fifth of
// StatementTimeout (3 s here), so a try after the network comes back
// answers and TryAcquire returns the lease it took, not "outcome unknown".
// Once released, the name is free at once.
func TestFaultReadBackHangs(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			px := newProxy(t, iso)
			client, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet, DisableNotify: true,
				StatementTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			const name, ttl = "readback-hangs", 30 * time.Second
			lat := px.add(t, "latency", "downstream", `{"latency":1000}`)
			type result struct {
				lease *dblock.Lease
				err   error
			}
			res := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				lease, err := client.TryAcquire(ctx, name, dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
				res <- result{lease, err}
			}()
			awaitHolder(t, iso, name)
			// Requests are dropped from now on (a toxic on the answers'
			// stream would let the delayed answer through). After 1.2 s
			// new connections pass again, but one made meanwhile stays
			// hung: what it sent is lost (removing the toxic would close
			// it instead, so it is made harmless to new links).
			drop := px.add(t, "timeout", "upstream", `{"timeout":0}`)
			px.cut(t)
			px.remove(t, lat)
			time.Sleep(1200 * time.Millisecond)
			if _, err := px.px.Toxics.UpdateToxicJson(drop, strings.NewReader(`{"toxicity":0}`)); err != nil {
				t.Fatalf("calm the toxic: %v", err)
			}
			var r result
			select {
			case r = <-res:
			case <-time.After(15 * time.Second):
				t.Fatal("TryAcquire did not return 15 s after its answer was lost")
			}
			if r.err != nil {
				t.Fatalf("TryAcquire whose answer was lost while the network dropped the first read-back = %v, want the lease it took", r.err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Owner != r.lease.Owner() || dblock.Token(h.Version) != r.lease.Token() {
				t.Fatalf("the lease returned (owner %q, token %d) is not the row's (%+v, %v)", r.lease.Owner(), r.lease.Token(), h, err)
			}
			if err := r.lease.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			phantomCheck(t, iso, name, ttl, 3*time.Second, "the release of a lease read back across a dropping network")
		})
	}
}

// awaitHolder waits, up to 5 s, until name's row names an owner.
func awaitHolder(t *testing.T, iso *dbtest.Isolated, name string) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		cancel()
		if err == nil && h.Owner != "" {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the acquire did not take effect within 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
