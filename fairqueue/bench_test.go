package fairqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
)

// contended runs b.N acquire+release pairs of one name over 8 goroutines and
// reports hand-offs per second.
func contended(b *testing.B, l dblock.Locker) {
	ctx := context.Background()
	name := locktest.RandomName("contended")
	var next sync.Mutex
	remaining := b.N
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if remaining == 0 {
					next.Unlock()
					return
				}
				remaining--
				next.Unlock()
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					b.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handoffs/s")
}

// BenchmarkContended compares fair hand-offs (this package) with unfair ones
// (optimistic mode: whoever polls first wins) on the same database, 8
// goroutines on one name. For fair mode it also reports the statements sent
// per hand-off (acquire, queue, heartbeat and release round trips, BEGIN and
// COMMIT included).
func BenchmarkContended(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			b.Run("fair", func(b *testing.B) {
				l, err := fairqueue.New(iso.DB, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = l.Close() }()
				before := l.Stats()
				contended(b, l)
				after := l.Stats()
				b.ReportMetric(float64(after.Statements-before.Statements)/float64(b.N), "stmts/handoff")
				b.ReportMetric(float64(after.Checks-before.Checks)/float64(b.N), "checks/handoff")
			})
			b.Run("unfair", func(b *testing.B) {
				l, err := optimistic.New(iso.DB, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = l.Close() }()
				contended(b, l)
			})
		})
	}
}
