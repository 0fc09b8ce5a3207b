package leasekeeper

import (
	"context"
	"time"
)

// ReadBack runs read, the read of a row whose last statement's answer was
// lost, until it answers: each try bounded by a fifth of bound, all of them
// within bound from now (ctx's end does not stop it: the outcome decides
// what the caller must undo), the pauses between tries jittered, from first
// doubling up to most. The failure that lost the answer often broke more
// than its own connection, and a try whose new connection hangs (a dial
// into a network that drops it) would otherwise use the whole bound. An
// error that is neither transient nor the try's own timeout ends it at
// once; ReadBack returns the last try's error.
func ReadBack(ctx context.Context, bound, first, most time.Duration, read func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	pause := first
	for {
		tctx, tcancel := context.WithTimeout(rctx, bound/5)
		err := read(tctx)
		timedOut := err != nil && tctx.Err() != nil && rctx.Err() == nil
		tcancel()
		if err == nil || !Transient(err) && !timedOut || rctx.Err() != nil {
			return err
		}
		t := time.NewTimer(jitter(pause))
		select {
		case <-t.C:
		case <-rctx.Done():
			t.Stop()
			return err
		}
		pause = min(pause*2, most)
	}
}
