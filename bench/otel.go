package main

import (
	"sync/atomic"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dblock-go/dblock/telemetry"
)

// keyOptOtel is optimistic Acquire+Release with an SDK recording every
// metric and span: the cost of telemetry when an application turns it on.
const keyOptOtel = "opt-otel"

// keyOptHistory is optimistic Acquire+Release with the acquisition history
// enabled (PostgreSQL and MariaDB; MySQL 8 keeps none).
const keyOptHistory = "opt-history"

// keyOptListened is optimistic Acquire+Release while the Locker listens
// for releases (a call of it waits on another name): the cost, to the
// releases of names nobody waits for, of announcements heard.
const keyOptListened = "opt-listened"

// recordingSDK is a telemetry.Config whose providers record everything in
// memory (spans are kept and dropped from time to time, so a long cell does
// not grow without bound).
func recordingSDK() *telemetry.Config {
	return &telemetry.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&droppingRecorder{})),
	}
}

// droppingRecorder records ended spans as an exporter would receive them,
// and forgets them every 4,096.
type droppingRecorder struct {
	tracetest.SpanRecorder
	n atomic.Int64
}

func (d *droppingRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	d.SpanRecorder.OnEnd(s)
	if d.n.Add(1)%4096 == 0 {
		d.SpanRecorder.Reset()
	}
}
