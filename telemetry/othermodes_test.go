package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/telemetry"
)

// TestReadOutcomes: a read lock's acquisitions are counted under mode read
// (a writer's under write): refused while a writer holds, cancelled, a
// waiter counted then granted when the writer releases, its hold ended as
// released; DoRead is one span with the read's acquire and release inside.
func TestReadOutcomes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		r := newRig(telemetry.NamesRaw)
		writer, err := rwlock.New(iso.DB, &rwlock.Config{Telemetry: r.cfg})
		must(t, err)
		defer writer.Close()
		reader, err := rwlock.New(iso.DB, &rwlock.Config{Telemetry: r.cfg})
		must(t, err)
		defer reader.Close()
		dialectAttr := attribute.String(telemetry.AttrDialect, string(iso.Kind))
		c := &outcomeCheck{t: t, ctx: ctx, rig: r, attrs: []attribute.KeyValue{
			attribute.String(telemetry.AttrMode, dblock.ModeRead), dialectAttr}}
		name := locktest.RandomName("otel-read")

		w, err := writer.Acquire(ctx, name)
		must(t, err)
		if _, err := reader.TryAcquireRead(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("TryAcquireRead while a writer holds: %v", err)
		}
		c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeBusy))
		cancelled, stop := context.WithCancel(ctx)
		stop()
		if _, err := reader.AcquireRead(cancelled, name); err == nil {
			t.Fatal("AcquireRead with a cancelled context succeeded while a writer holds")
		}
		c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeCanceled))

		got := make(chan error, 1)
		var read *dblock.Lease
		go func() {
			var err error
			read, err = reader.AcquireRead(ctx, name)
			got <- err
		}()
		c.eventually(ctx, telemetry.Waiters, 1)
		must(t, w.Release(ctx))
		must(t, <-got)
		c.want(telemetry.Waiters, 0)
		c.want(telemetry.AcquireDuration, 1, outcome(telemetry.OutcomeAcquired))
		c.want(telemetry.WaitDuration, 1)
		must(t, read.Release(ctx))
		c.want(telemetry.HoldDuration, 1, attribute.String(telemetry.AttrEnd, "released"))
		writes := &outcomeCheck{t: t, rig: r, attrs: []attribute.KeyValue{
			attribute.String(telemetry.AttrMode, dblock.ModeWrite), dialectAttr}}
		writes.want(telemetry.Acquisitions, 1)

		r.spans.Reset()
		must(t, reader.DoRead(ctx, name, func(context.Context) error { return nil }))
		do := one(t, r, "dblock.do")
		for _, child := range []string{"dblock.acquire", "dblock.release"} {
			s := one(t, r, child)
			if s.Parent().SpanID() != do.SpanContext().SpanID() {
				t.Errorf("the %s span is not a child of the DoRead span", child)
			}
			if v, ok := attr(s, telemetry.AttrMode); !ok || v.AsString() != dblock.ModeRead {
				t.Errorf("%s span mode %q, want read", child, v.AsString())
			}
		}
	})
}

// TestElectionTerms: an election's terms are optimistic leases in its
// Config's providers: a term counts as an acquisition, a rival's campaign
// as a waiter while it waits, the resignation as a released hold.
func TestElectionTerms(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		r := newRig(telemetry.NamesRaw)
		name := locktest.RandomName("otel-election")
		a, err := election.New(iso.DB, name, &election.Config{Telemetry: r.cfg})
		must(t, err)
		defer a.Close()
		b, err := election.New(iso.DB, name, &election.Config{Telemetry: r.cfg})
		must(t, err)
		defer b.Close()
		c := &outcomeCheck{t: t, ctx: ctx, rig: r, attrs: []attribute.KeyValue{
			attribute.String(telemetry.AttrMode, dblock.ModeOptimistic),
			attribute.String(telemetry.AttrDialect, string(iso.Kind))}}
		term, err := a.Campaign(ctx, "a")
		must(t, err)
		c.want(telemetry.Acquisitions, 1)
		got := make(chan error, 1)
		go func() {
			_, err := b.Campaign(ctx, "b")
			got <- err
		}()
		c.eventually(ctx, telemetry.Waiters, 1)
		if ok, err := a.Resign(ctx); err != nil || !ok {
			t.Fatalf("resign: %v %v", ok, err)
		}
		must(t, <-got)
		c.want(telemetry.Acquisitions, 2)
		c.want(telemetry.HoldDuration, 1, attribute.String(telemetry.AttrEnd, "released"))
		if term.Token() <= 0 {
			t.Errorf("term token %d", term.Token())
		}
	})
}
