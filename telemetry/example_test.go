package telemetry_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/telemetry"
)

// A Locker reporting to an SDK of its own; without one in the Config it
// reports to the global providers (otel.SetMeterProvider).
func Example() {
	db, cleanup := exampledb.Open("telemetry.db")
	defer cleanup()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	locker, err := optimistic.New(db, &optimistic.Config{
		Telemetry: &telemetry.Config{MeterProvider: meters, Names: telemetry.NamesHashed},
	})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		panic(err)
	}
	_ = lease.Release(ctx)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == telemetry.Acquisitions {
			fmt.Println(m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output: dblock.acquisitions 1
}
