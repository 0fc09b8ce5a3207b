package leasekeeper

import (
	"context"
	"time"
)

// A lease's watchdog (watch: renewals and the local deadline) is not started
// with the lease: nothing is due before the first renewal, TTL/3 after the
// acquisition, and most holds end sooner. armWatch sets a timer that starts
// it then (or at the local deadline, when a short MaxHold puts that
// earlier); halt stops it, started or not. A hold that ends before its
// first renewal costs one timer, no goroutine.

// watchState is where a lease's watchdog is.
type watchState int

const (
	watchArmed   watchState = iota // The timer is set; no goroutine yet.
	watchRunning                   // watch runs.
	watchHalted                    // Stopped: Release began or the lease was lost.
)

// armWatch sets the timer that starts the watchdog.
func (h *held) armWatch() {
	first := h.acquired.Add(h.p.TTL / 3)
	if d := h.currentDeadline(); d.Before(first) {
		first = d
	}
	h.mu.Lock()
	h.wake = time.AfterFunc(max(0, time.Until(first)), h.startWatch)
	h.mu.Unlock()
}

// startWatch runs the watchdog in the timer's goroutine, unless it was
// halted first.
func (h *held) startWatch() {
	h.mu.Lock()
	if h.watching != watchArmed {
		h.mu.Unlock()
		return
	}
	h.watching = watchRunning
	h.ctx, h.stop = context.WithCancel(context.Background())
	h.mu.Unlock()
	h.watch()
}

// halt stops the watchdog: a running one is cancelled (watch closes
// watchDone when it returns); one not started yet never starts, and
// watchDone closes here.
func (h *held) halt() {
	h.mu.Lock()
	switch h.watching {
	case watchArmed:
		h.watching = watchHalted
		h.wake.Stop()
		h.mu.Unlock()
		close(h.watchDone)
		h.k.wg.Done()
	case watchRunning:
		h.watching = watchHalted
		stop := h.stop
		h.mu.Unlock()
		stop()
	default:
		h.mu.Unlock()
	}
}
