package faults

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

var quiet = slog.New(slog.DiscardHandler)

func serverKinds() []store.Kind { return []store.Kind{store.Postgres, store.MySQL} }

// pollAcquire tries name on l every 10 ms until it gets it or max passes. It
// returns the lease (nil if never) and when the successful attempt returned.
func pollAcquire(t *testing.T, l dblock.Locker, name string, max time.Duration) (*dblock.Lease, time.Time) {
	t.Helper()
	end := time.Now().Add(max)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lease, err := l.TryAcquire(ctx, name, dblock.WithTTL(time.Minute))
		cancel()
		if err == nil {
			return lease, time.Now()
		}
		if !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("rival TryAcquire: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, time.Time{}
}

// TestFaultLatencyLongerThanLease puts 2.5 s of latency (both directions)
// between a holder and the database while it holds a 1 s renewed lease. The
// holder must report the loss (Done closes, Err wraps ErrLost) no later than
// the moment a rival on a direct connection acquires the name: its local
// deadline (request start + TTL) ends before the database's expiry.
func TestFaultLatencyLongerThanLease(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			px := newProxy(t, iso)
			holder, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()

			const ttl = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := holder.Acquire(ctx, "latency", dblock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			lostAt := make(chan time.Time, 1)
			go func() {
				<-lease.Done()
				lostAt <- time.Now()
			}()
			up := px.add(t, "latency", "upstream", `{"latency":2500}`)
			down := px.add(t, "latency", "downstream", `{"latency":2500}`)

			got, rivalAt := pollAcquire(t, rival, "latency", 10*time.Second)
			if got == nil {
				t.Fatal("the rival never acquired the name (10 s)")
			}
			var lost time.Time
			select {
			case lost = <-lostAt:
			case <-time.After(5 * time.Second):
				t.Fatal("the rival holds the name but the holder's Done() is still open")
			}
			deadline, _ := lease.Deadline()
			if !lost.Before(rivalAt) {
				t.Errorf("holder reported the loss at %v, after the rival had acquired at %v", lost, rivalAt)
			}
			if !deadline.Before(rivalAt) {
				t.Errorf("holder's local deadline %v is not before the rival's acquisition %v", deadline, rivalAt)
			}
			if err := lease.Err(); !errors.Is(err, dblock.ErrLost) {
				t.Errorf("Err() = %v, want ErrLost", err)
			}
			px.remove(t, up)
			px.remove(t, down)
			if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
				t.Errorf("Release after the loss = %v, want ErrLost", err)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := holder.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			t.Logf("holder reported the loss %v before the rival acquired", rivalAt.Sub(lost).Round(time.Millisecond))
		})
	}
}

// phantomCheck fails t unless a rival on a direct connection gets name within
// bound: a lock whose acquisition (or release) had an unknown outcome must not
// stay held by an owner that does not know it holds it for the full TTL.
func phantomCheck(t *testing.T, iso *dbtest.Isolated, name string, ttl, bound time.Duration, what string) {
	t.Helper()
	rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close()
	start := time.Now()
	got, _ := pollAcquire(t, rival, name, bound)
	if got == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, _ := iso.Store().LeaseHolder(ctx, nil, name)
		t.Fatalf("%s: phantom holder: the name is still held %v later by owner %q until %v (TTL %v); "+
			"the library must clean up an unknown outcome by owner", what, bound, h.Owner, h.ExpiresAt.Sub(h.Now).Round(time.Millisecond), ttl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = got.Release(ctx)
	t.Logf("%s: name free %v later", what, time.Since(start).Round(time.Millisecond))
}

// cutWhile runs op through the proxy with 1 s of downstream latency, so its
// statement runs on the server while the answer waits in the proxy, waits
// until ran reports (on a direct connection) that the statement took effect,
// and then cuts every proxied connection: the answer is lost. The statement
// may come 10 s after the latency began: each of several statements on its
// way waits a second for its answer, and on PostgreSQL a second more for the
// ping that the pool sends on a connection idle for a second.
func cutWhile(t *testing.T, px *netProxy, ran func() bool, op func(ctx context.Context) error) error {
	t.Helper()
	lat := px.add(t, "latency", "downstream", `{"latency":1000}`)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res <- op(ctx)
	}()
	end := time.Now().Add(10 * time.Second)
	for !ran() {
		if time.Now().After(end) {
			t.Fatal("the statement did not take effect within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	px.cut(t)
	px.remove(t, lat)
	select {
	case err := <-res:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("operation did not return 15 s after its connection was cut")
	}
	return nil
}

// TestFaultResetDuringAcquire cuts the connection while the answer to an
// acquire is on its way back (the statement ran and committed). The caller must get an
// unambiguous result: either the lease (it holds the name) or an error that
// is not "not acquired" — and in the error case no phantom holder may keep
// the name for the TTL (30 s): the library must release by owner.
func TestFaultResetDuringAcquire(t *testing.T) {
	for _, kind := range serverKinds() {
		for _, waiting := range []bool{false, true} {
			sub := "try"
			if waiting {
				sub = "wait"
			}
			t.Run(string(kind)+"/"+sub, func(t *testing.T) {
				t.Parallel()
				iso := dbtest.New(t, kind)
				px := newProxy(t, iso)
				client, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet, DisableNotify: true})
				if err != nil {
					t.Fatal(err)
				}
				defer client.Close()
				const ttl = 30 * time.Second
				var lease *dblock.Lease
				ran := func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					h, err := iso.Store().LeaseHolder(ctx, nil, "reset-acq")
					return err == nil && h.Owner != ""
				}
				err = cutWhile(t, px, ran, func(ctx context.Context) error {
					var err error
					if waiting {
						lease, err = client.Acquire(ctx, "reset-acq", dblock.WithTTL(ttl), dblock.WithMaxHold(ttl), dblock.WithWait(5*time.Second))
					} else {
						lease, err = client.TryAcquire(ctx, "reset-acq", dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
					}
					return err
				})
				switch {
				case err == nil:
					// It says it holds the name: it must, and releasing must free it.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					h, herr := iso.Store().LeaseHolder(ctx, nil, "reset-acq")
					if herr != nil || h.Owner != lease.Owner() {
						t.Fatalf("acquire succeeded but the row names %q (%v), not %q", h.Owner, herr, lease.Owner())
					}
					if err := lease.Release(ctx); err != nil {
						t.Fatalf("release: %v", err)
					}
					phantomCheck(t, iso, "reset-acq", ttl, 3*time.Second, "acquired across a cut, then released")
				case errors.Is(err, dblock.ErrNotAcquired):
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					h, _ := iso.Store().LeaseHolder(ctx, nil, "reset-acq")
					if h.Held() {
						t.Fatalf("ambiguous result: acquire returned %v, but the row names owner %q until %v", err, h.Owner, h.ExpiresAt)
					}
				default:
					t.Logf("acquire across the cut: %v", err)
					phantomCheck(t, iso, "reset-acq", ttl, 3*time.Second, "acquire with an unknown outcome")
				}
			})
		}
	}
}

// TestFaultResetDuringRelease breaks a release in two ways. "request":
// reset_peer on the way to the server for 300 ms while Release runs, so the
// request may never arrive. "answer": the release runs and commits on the
// server, then its answer is lost (every proxied connection cut). Release is
// a CAS on (name, owner, token), retried on a fresh connection after
// reading the row: either way the caller must not be told the lease was
// lost or not held (it was held, and it is released), and the name must be
// free at once, not held by the released lease for its TTL.
func TestFaultResetDuringRelease(t *testing.T) {
	for _, kind := range serverKinds() {
		for _, sub := range []string{"request", "answer"} {
			t.Run(string(kind)+"/"+sub, func(t *testing.T) {
				t.Parallel()
				iso := dbtest.New(t, kind)
				px := newProxy(t, iso)
				client, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet, DisableNotify: true})
				if err != nil {
					t.Fatal(err)
				}
				defer client.Close()
				const ttl = 30 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				lease, err := client.Acquire(ctx, "reset-rel", dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
				if err != nil {
					t.Fatal(err)
				}
				var relErr error
				if sub == "request" {
					reset := px.add(t, "reset_peer", "upstream", `{"timeout":0}`)
					res := make(chan error, 1)
					go func() {
						rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer rcancel()
						res <- lease.Release(rctx)
					}()
					time.Sleep(300 * time.Millisecond)
					px.remove(t, reset)
					select {
					case relErr = <-res:
					case <-time.After(10 * time.Second):
						t.Fatal("Release did not return")
					}
				} else {
					freed := func() bool {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						h, err := iso.Store().LeaseHolder(ctx, nil, "reset-rel")
						return err == nil && h.Owner != lease.Owner()
					}
					relErr = cutWhile(t, px, freed, func(ctx context.Context) error { return lease.Release(ctx) })
				}
				t.Logf("release across the %s reset: %v", sub, relErr)
				if errors.Is(relErr, dblock.ErrNotHeld) || errors.Is(relErr, dblock.ErrLost) {
					t.Errorf("Release of a held lease whose connection was reset = %v: it says the lease was not held or lost", relErr)
				}
				if relErr != nil && !errors.Is(relErr, dblock.ErrUnavailable) {
					t.Errorf("Release across a reset = %v, want nil or an error wrapping ErrUnavailable", relErr)
				}
				phantomCheck(t, iso, "reset-rel", ttl, 3*time.Second, "release across a "+sub+" reset")
			})
		}
	}
}

// TestFaultAcquireWhileDown: a waiting Acquire whose every attempt fails (the
// database cannot be reached: the proxy in front of it is stopped) ends its
// wait with an error that says so (ErrUnavailable), never with "not
// acquired", which would claim another owner holds the name.
func TestFaultAcquireWhileDown(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			px := newProxy(t, iso)
			client, err := optimistic.New(px.open(t), &optimistic.Config{Logger: quiet, DisableNotify: true, StatementTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			px.px.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := client.Acquire(ctx, "down", dblock.WithWait(2*time.Second))
			if lease != nil {
				t.Fatalf("acquired %q while the database was unreachable", lease.Name())
			}
			if !errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("Acquire while the database is unreachable = %v, want ErrUnavailable and not ErrNotAcquired", err)
			}
			t.Logf("while down: %v", err)
		})
	}
}
