package telemetry_test

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/telemetry"
)

// BenchmarkPair is one optimistic acquire+release on each database, with
// the global providers (no SDK: what every application pays) and with an
// SDK recording every metric and span in memory. Compare the two lines of a
// run: tracing with an SDK installed should cost under 5%.
func BenchmarkPair(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		iso := dbtest.New(b, kind)
		for _, sdk := range []bool{false, true} {
			label := "none"
			var cfg *telemetry.Config
			if sdk {
				label, cfg = "sdk", newRig(telemetry.NamesRaw).cfg
			}
			b.Run(string(kind)+"/"+label, func(b *testing.B) {
				l, err := optimistic.New(iso.DB, &optimistic.Config{Telemetry: cfg})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				ctx := context.Background()
				name := locktest.RandomName("otel-bench")
				b.ReportAllocs()
				for b.Loop() {
					lease, err := l.Acquire(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
