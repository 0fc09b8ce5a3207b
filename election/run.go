package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
)

// Run campaigns with value and, each time this candidate is elected, runs
// fn with a context that is cancelled, with the loss as its cause, when the
// term is lost. When a term is lost Run campaigns again, so fn runs once per
// term won; it stops when ctx ends (returning nil) or when fn returns while
// its term still holds: it then resigns (bounded by Config.ResignTimeout)
// and returns fn's error. fn is meant to run until its context ends.
//
// A campaign that fails for a reason other than ctx (the database
// unreachable) is retried with a capped backoff; the failure is logged at
// Warn.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context) error) error {
	r := runLoop{e: e, ctx: ctx, value: value, fn: fn, pause: 100 * time.Millisecond}
	for {
		done, err := r.term()
		if done {
			return err
		}
	}
}

// runLoop is one Run call: its terms, one at a time.
type runLoop struct {
	e     *Election
	ctx   context.Context
	value string
	fn    func(ctx context.Context) error
	pause time.Duration // The next pause after a failed campaign.
}

// term campaigns, runs fn for the term won, and reports whether Run is
// done, and with what error.
func (r *runLoop) term() (bool, error) {
	term, err := r.e.Campaign(r.ctx, r.value)
	if err != nil {
		return r.campaignFailed(err)
	}
	r.pause = 100 * time.Millisecond
	tctx, cancel := term.Context(r.ctx)
	ferr := r.fn(tctx)
	cancel()
	if r.ctx.Err() != nil || term.Err() == nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.e.cfg.ResignTimeout)
		_, rerr := r.e.Resign(rctx)
		rcancel()
		if r.ctx.Err() != nil {
			return true, nil
		}
		return true, errors.Join(ferr, rerr)
	}
	r.e.log.LogAttrs(r.ctx, slog.LevelDebug, "election: term lost, campaigning again",
		slog.String("election", r.e.name), slog.Int64("term", int64(term.Token())), slog.String("error", fmt.Sprint(term.Err())))
	return false, nil
}

// campaignFailed decides after a failed campaign: done when ctx ended,
// else a pause before the next.
func (r *runLoop) campaignFailed(err error) (bool, error) {
	if r.ctx.Err() != nil {
		return true, nil
	}
	if errors.Is(err, dblock.ErrClosed) || errors.Is(err, dblock.ErrInvalidOption) {
		return true, err
	}
	r.e.log.LogAttrs(r.ctx, slog.LevelWarn, "election: campaign failed, retrying",
		slog.String("election", r.e.name), slog.String("error", err.Error()))
	t := time.NewTimer(backoff.Jitter(r.pause))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.ctx.Done():
		return true, nil
	case <-r.e.closing:
		return true, fmt.Errorf("election %q: run: %w", r.e.name, dblock.ErrClosed)
	}
	r.pause = min(2*r.pause, 5*time.Second)
	return false, nil
}
