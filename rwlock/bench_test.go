package rwlock_test

import (
	"context"
	"testing"

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
			ctx := context.Background()
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
			b.Run("optimistic", func(b *testing.B) {
				name := locktest.RandomName("bench-opt")
				b.ReportAllocs()
				for b.Loop() {
					lease, err := o.Acquire(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("read", func(b *testing.B) {
				name := locktest.RandomName("bench-read")
				b.ReportAllocs()
				for b.Loop() {
					lease, err := l.AcquireRead(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
