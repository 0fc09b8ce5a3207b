package obs

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dblock-go/dblock"
)

// Events carries an acquisition's life to the application's hooks and to
// the Recorder's instruments. Every lock mode reports through one.
type Events struct {
	hooks dblock.Hooks
	rec   *Recorder
}

// NewEvents reports to hooks (nil: none) and rec (nil: no instruments, as
// for the reaper's own lease).
func NewEvents(hooks *dblock.Hooks, rec *Recorder) Events {
	e := Events{rec: rec}
	if hooks != nil {
		e.hooks = *hooks
	}
	return e
}

// Recorder returns the Recorder behind e.
func (e Events) Recorder() *Recorder { return e.rec }

// Acquired reports an acquisition after a wait of waited.
func (e Events) Acquired(name, owner string, token dblock.Token, waited time.Duration) {
	if r := e.rec; r != nil {
		add(context.Background(), r.acquisitions, 1, r.base)
		record(context.Background(), r.waitDur, waited.Seconds(), r.base)
	}
	if f := e.hooks.OnAcquired; f != nil {
		f(name, owner, token, waited)
	}
}

// Released reports a release after a hold of held.
func (e Events) Released(name, owner string, token dblock.Token, held time.Duration) {
	if r := e.rec; r != nil {
		record(context.Background(), r.holdDur, held.Seconds(), r.released)
	}
	if f := e.hooks.OnReleased; f != nil {
		f(name, owner, token, held)
	}
}

// Lost reports a loss (err is the *dblock.LostError) after a hold of held.
func (e Events) Lost(name, owner string, token dblock.Token, err error, held time.Duration) {
	if r := e.rec; r != nil {
		add(context.Background(), r.losses, 1, r.reasons[reason(err)])
		record(context.Background(), r.holdDur, held.Seconds(), r.lost)
	}
	if f := e.hooks.OnLost; f != nil {
		f(name, owner, token, err)
	}
}

// BeginSpan starts the span op of label on e's Recorder (a span that
// records nothing without one); end it with EndSpan.
func (e Events) BeginSpan(ctx context.Context, op, label string) (context.Context, trace.Span) {
	if e.rec == nil {
		return ctx, noop.Span{}
	}
	return e.rec.BeginSpan(ctx, op, label)
}

// RenewalFailed reports a renewal that failed and will be retried.
func (e Events) RenewalFailed() {
	if r := e.rec; r != nil {
		add(context.Background(), r.renewFails, 1, r.base)
	}
}
