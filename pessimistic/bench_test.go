package pessimistic_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// BenchmarkDo compares the callback form with the floor: a hand-written
// BEGIN / SELECT ... FOR UPDATE / COMMIT on the same row of the same database
// (on SQLite, BEGIN IMMEDIATE / SELECT / COMMIT). The bar is Do/floor (Do's
// throughput as a fraction of the floor's) of at least 0.9.
func BenchmarkDo(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			ctx := context.Background()
			name := "bench:do"
			l, err := pessimistic.New(iso.DB, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			// Create the row once, as a running system would have it.
			if err := l.Do(ctx, name, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				b.Fatal(err)
			}
			query := "SELECT name FROM dblock_locks WHERE name = $1 FOR UPDATE"
			switch kind {
			case store.MySQL:
				query = "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE"
			case store.SQLite:
				query = "SELECT name FROM dblock_locks WHERE name = ?1"
			}
			floor := func() {
				tx, err := iso.Store().BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				var got string
				if err := tx.QueryRowContext(ctx, query, name).Scan(&got); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			do := func() {
				if err := l.Do(ctx, name, func(context.Context, *sql.Tx) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
			// The two run in alternating batches, so that load from
			// elsewhere on the machine falls on both alike; the metric
			// "Do/floor" is Do's throughput as a fraction of the floor's.
			const batch = 20
			var tFloor, tDo time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				for range batch {
					floor()
				}
				t1 := time.Now()
				for range batch {
					do()
				}
				tFloor += t1.Sub(t0)
				tDo += time.Since(t1)
				n += batch
			}
			b.ReportMetric(float64(tFloor.Nanoseconds())/float64(n), "floor-ns/op")
			b.ReportMetric(float64(tDo.Nanoseconds())/float64(n), "Do-ns/op")
			b.ReportMetric(float64(tFloor)/float64(tDo), "Do/floor")
		})
	}
}
