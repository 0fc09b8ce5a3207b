package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/rwlock"
)

// TestFaultReadBackHangs: an acquire (optimistic TryAcquire, or rwlock's
// TryAcquireRead) commits on the server, its answer is lost (every proxied
// connection cut), and for the next 1.2 s the network drops every request,
// so the first read of the row hangs on its new connection. The read-back
// is tried again, each try bounded by a fifth of StatementTimeout (3 s
// here), so a try after the network comes back answers and the call
// returns the lease it took, not "outcome unknown". Once released, the
// name is free at once.
func TestFaultReadBackHangs(t *testing.T) {
	for _, kind := range serverKinds() {
		for _, mode := range []string{"optimistic", "read"} {
			t.Run(string(kind)+"/"+mode, func(t *testing.T) {
				t.Parallel()
				readBackHangs(t, kind, mode)
			})
		}
	}
}

// tryFunc is a TryAcquire of one mode.
type tryFunc func(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)

// readBackClient opens mode's Locker through px, StatementTimeout 3 s.
func readBackClient(t *testing.T, px *netProxy, mode string) tryFunc {
	t.Helper()
	const stmt = 3 * time.Second
	if mode == "read" {
		l, err := rwlock.New(px.open(t), &rwlock.Config{Logger: quiet, DisableNotify: true, StatementTimeout: stmt})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l.TryAcquireRead
	}
	l, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet, DisableNotify: true, StatementTimeout: stmt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.TryAcquire
}

func readBackHangs(t *testing.T, kind store.Kind, mode string) {
	iso := dbtest.New(t, kind)
	px := newProxy(t, iso)
	try := readBackClient(t, px, mode)
	const name, ttl = "readback-hangs", 30 * time.Second
	// Answers wait a second (see keyedToxic), so the acquire's answer is
	// still on its way when its statement has committed on the server.
	answers, requests := t.Name()+"/answers", t.Name()+"/requests"
	t.Cleanup(func() { keyed.Delete(answers); keyed.Delete(requests) })
	keyed.Store(answers, true)
	px.add(t, "keyed", "downstream", fmt.Sprintf(`{"key":%q,"delay":1000}`, answers))
	type result struct {
		lease *dblock.Lease
		err   error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		lease, err := try(ctx, name, dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
		res <- result{lease, err}
	}()
	awaitHeld(t, iso, name)
	// Requests are dropped from now on, the connections cut (the answer
	// is lost) and answers pass at once again. After 1.2 s requests pass
	// again, but a connection made meanwhile stays hung: what it sent is
	// lost.
	keyed.Store(requests, true)
	px.add(t, "keyed", "upstream", fmt.Sprintf(`{"key":%q}`, requests))
	px.cut(t)
	keyed.Delete(answers)
	time.Sleep(1200 * time.Millisecond)
	keyed.Delete(requests)
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
	h, err := iso.Store().LeaseHolder(ctx, nil, name)
	if mode == "read" {
		h, err = iso.Store().ShareHolder(ctx, name, r.lease.Owner())
	}
	if err != nil || h.Owner != r.lease.Owner() || dblock.Token(h.Version) != r.lease.Token() || h.Reentry != 1 {
		t.Fatalf("the lease returned (owner %q, token %d) is not the row's (%+v, %v)", r.lease.Owner(), r.lease.Token(), h, err)
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	phantomCheck(t, iso, name, ttl, 3*time.Second, "the release of a lease read back across a dropping network")
}

// awaitHeld waits, up to 5 s, until name is held (by an owner or readers).
func awaitHeld(t *testing.T, iso *dbtest.Isolated, name string) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		cancel()
		if err == nil && h.Held() {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the acquire did not take effect within 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// keyedToxic, while its key is in keyed, delays every chunk by Delay ms, or
// drops it when Delay is 0; after, it passes them on. What a connection
// sent during a drop is lost, so it stays hung, while new connections pass.
// The test ends a delay or a drop by its key, not by removing the toxic:
// toxiproxy's removal of a toxic waits for the links it is in, and links
// hung in MariaDB's handshake kept the removal of a latency toxic waiting
// (in about one run of four) until the read-back's last try gave up, every
// try dialing meanwhile into a drop not yet ended.
type keyedToxic struct {
	Key   string `json:"key"`
	Delay int    `json:"delay"`
}

// keyed holds the keys of the keyed toxics at work.
var keyed sync.Map

func (k *keyedToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if _, on := keyed.Load(k.Key); on {
				if k.Delay == 0 {
					continue // Dropped.
				}
				if !k.delay(stub) {
					return
				}
			}
			stub.Output <- c
		}
	}
}

// delay waits Delay ms, or until the stub is interrupted (false).
func (k *keyedToxic) delay(stub *toxics.ToxicStub) bool {
	t := time.NewTimer(time.Duration(k.Delay) * time.Millisecond)
	defer t.Stop()
	select {
	case <-stub.Interrupt:
		return false
	case <-t.C:
		return true
	}
}

func init() { toxics.Register("keyed", new(keyedToxic)) }
