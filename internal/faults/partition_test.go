package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestFaultPartitionedPessimisticHolder blackholes (toxiproxy) the network
// between a pessimistic holder and the database. The holder's connection does
// not drop, so only the server can end its transaction: with a 2 s TTL the
// server ends the idle transaction (idle_in_transaction_session_timeout,
// MariaDB idle_transaction_timeout) and a rival on a direct connection gets
// the name within TTL + 3 s. When the partition heals, the holder's Done()
// closes and Err() wraps ErrLost.
func TestFaultPartitionedPessimisticHolder(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso, px, holder := proxiedHolder(t, kind)
			rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const ttl = 2 * time.Second
			lease, err := holder.Acquire(ctx, "partitioned", dblock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			heal := px.partition(t)
			partitionedAt := time.Now()
			got, at := pollAcquire(t, rival, "partitioned", ttl+3*time.Second)
			if got == nil {
				heal()
				t.Fatalf("the partitioned pessimistic holder still has the name %v later (TTL %v): the server did not end its transaction", ttl+3*time.Second, ttl)
			}
			freedAfter := at.Sub(partitionedAt)
			heal()
			select {
			case <-lease.Done():
			case <-time.After(15 * time.Second):
				t.Fatal("the holder's Done() is still open 15 s after the partition healed")
			}
			if err := lease.Err(); !errors.Is(err, dblock.ErrLost) {
				t.Fatalf("Err() = %v, want ErrLost", err)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			closeWithin(t, holder, 15*time.Second, "after the partition")
			t.Logf("the server freed the name %v after the partition began (TTL %v)", freedAfter.Round(time.Millisecond), ttl)
		})
	}
}

// TestFaultCommitIntoPartition: a pessimistic hold's COMMIT sent into a
// blackholed network (toxiproxy) returns when Release's context ends, saying
// that the outcome is unknown (ErrUnavailable), instead of waiting for the
// network: pgx gives up a COMMIT whose context ends, and on MariaDB and
// MySQL the socket dblock dialed is closed under the driver. The holder's
// Close then returns too.
func TestFaultCommitIntoPartition(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			_, px, holder := proxiedHolder(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lease, err := holder.Acquire(ctx, "commit-partitioned", dblock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			heal := px.partition(t)
			defer heal()
			const bound = 500 * time.Millisecond
			rctx, rcancel := context.WithTimeout(ctx, bound)
			defer rcancel()
			start := time.Now()
			err = lease.Release(rctx)
			took := time.Since(start)
			if !errors.Is(err, dblock.ErrUnavailable) {
				t.Errorf("Release into a partition = %v, want an error wrapping ErrUnavailable", err)
			}
			if took > bound+2*time.Second {
				t.Errorf("Release into a partition returned after %v, its context ended after %v", took, bound)
			}
			closeWithin(t, holder, 15*time.Second, "after a commit into a partition")
			t.Logf("Release returned after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// proxiedHolder is a pessimistic Locker whose pool reaches kind's server
// through a toxiproxy, over a database of its own.
func proxiedHolder(t *testing.T, kind store.Kind) (*dbtest.Isolated, *netProxy, *pessimistic.Locker) {
	t.Helper()
	iso := dbtest.New(t, kind)
	px := newProxy(t, iso)
	holder, err := pessimistic.New(px.open(t), &pessimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return iso, px, holder
}

// closeWithin closes holder, failing t if Close has not returned within d
// (after what happened to it).
func closeWithin(t *testing.T, holder *pessimistic.Locker, d time.Duration, after string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- holder.Close() }()
	select {
	case <-closed:
	case <-time.After(d):
		t.Fatalf("holder.Close hangs %s", after)
	}
}
