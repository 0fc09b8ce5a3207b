package rwlock_test

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/rwlock"
)

// BenchmarkReadPair measures one uncontended AcquireRead+Release beside an
// optimistic Acquire+Release on the same database in the same run (the
// bench's bar: a read pair at 0.9× an optimistic pair or better).
func BenchmarkReadPair(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			o, err := optimistic.New(iso.DB, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = o.Close() }()
			l, err := rwlock.New(iso.DB, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = l.Close() }()
			b.Run("optimistic", func(b *testing.B) { pairs(b, "bench-opt", o.Acquire) })
			b.Run("read", func(b *testing.B) { pairs(b, "bench-read", l.AcquireRead) })
		})
	}
}

// pairs runs acquire and Release of the lease on one name per iteration.
func pairs(b *testing.B, prefix string, acquire func(context.Context, string, ...dblock.Option) (*dblock.Lease, error)) {
	ctx, name := context.Background(), locktest.RandomName(prefix)
	b.ReportAllocs()
	for b.Loop() {
		lease, err := acquire(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
