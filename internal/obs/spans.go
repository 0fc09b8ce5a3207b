package obs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/telemetry"
)

// Span names.
const (
	SpanAcquire = "dblock.acquire"
	SpanRelease = "dblock.release"
	SpanDo      = "dblock.do"
)

// Acquire is one acquire call in progress: its span, its start, and
// whether it counts as a waiter.
type Acquire struct {
	r       *Recorder
	ctx     context.Context
	span    trace.Span
	start   time.Time
	waiting bool
}

// BeginAcquire starts timing an acquire call of label (a name, or names
// joined by commas); wait says whether the call may wait (Acquire, not
// TryAcquire). The returned context carries the span: pass it on to the
// call's statements.
func (r *Recorder) BeginAcquire(ctx context.Context, label string, wait bool) (context.Context, Acquire) {
	var span trace.Span = noop.Span{}
	if r.tracing() {
		ctx, span = r.startSpan(ctx, SpanAcquire, label, attribute.Bool("dblock.wait", wait))
	}
	waiting := wait && r.waiters.Enabled(ctx)
	if waiting {
		r.waiters.Add(ctx, 1, r.base.add...)
	}
	return ctx, Acquire{r: r, ctx: ctx, span: span, start: time.Now(), waiting: waiting}
}

// End records the call's duration and outcome, lease's token on the span.
func (a Acquire) End(lease *dblock.Lease, err error) {
	var token dblock.Token
	if lease != nil {
		token = lease.Token()
	}
	a.EndToken(token, err)
}

// EndToken is End for a mode whose lease is not a *dblock.Lease.
func (a Acquire) EndToken(token dblock.Token, err error) {
	r := a.r
	o := outcome(err)
	record(a.ctx, r.acquireDur, time.Since(a.start).Seconds(), r.outcomes[o])
	if a.waiting {
		r.waiters.Add(a.ctx, -1, r.base.add...)
	}
	endSpan(a.span, o, token, err)
}

// BeginSpan starts the span of a release (SpanRelease) or a Do (SpanDo)
// of label; end it with EndSpan. A nil Recorder starts none.
func (r *Recorder) BeginSpan(ctx context.Context, op, label string) (context.Context, trace.Span) {
	if r == nil || !r.tracing() {
		return ctx, noop.Span{}
	}
	return r.startSpan(ctx, op, label)
}

// startSpan starts span op with its attributes: the mode, label as the
// name policy wants it, and extra, set in one call (each call costs the SDK
// an allocation or two).
func (r *Recorder) startSpan(ctx context.Context, op, label string, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := r.tracer.Start(ctx, op, r.spanStart...)
	if !span.IsRecording() {
		return ctx, span
	}
	attrs := make([]attribute.KeyValue, 0, 2+len(extra))
	attrs = append(attrs, r.modeAttr)
	if kv, ok := r.nameAttr(label); ok {
		attrs = append(attrs, kv)
	}
	span.SetAttributes(append(attrs, extra...)...)
	return ctx, span
}

// EndSpan ends a span from BeginSpan with err's outcome.
func EndSpan(span trace.Span, token dblock.Token, err error) {
	o := "ok"
	if err != nil {
		o = "error"
	}
	endSpan(span, o, token, err)
}

func endSpan(span trace.Span, outcome string, token dblock.Token, err error) {
	if span.IsRecording() {
		if token != 0 {
			span.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome), attribute.Int64(telemetry.AttrToken, int64(token)))
		} else {
			span.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// nameAttr is label's attribute as the name policy wants it (none when
// names are dropped).
func (r *Recorder) nameAttr(label string) (attribute.KeyValue, bool) {
	switch r.names {
	case telemetry.NamesDropped:
		return attribute.KeyValue{}, false
	case telemetry.NamesHashed:
		sum := sha256.Sum256([]byte(label))
		return attribute.String(telemetry.AttrName, hex.EncodeToString(sum[:8])), true
	default:
		return attribute.String(telemetry.AttrName, label), true
	}
}
