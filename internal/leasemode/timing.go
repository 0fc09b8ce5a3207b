package leasemode

import (
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
)

// Defaults of the waits of the lease modes' Configs; each package exports
// the same values under its own names (optimistic.PollMinDefault, ...).
const (
	PollMinDefault          = 5 * time.Millisecond
	PollMaxDefault          = 250 * time.Millisecond
	ReleaseTimeoutDefault   = 5 * time.Second
	StatementTimeoutDefault = 10 * time.Second
)

// Timing are the waits of a lease mode's Config: a waiter's backoff, the
// bound of a release and of an acquire statement.
type Timing struct {
	PollMin, PollMax                 time.Duration
	ReleaseTimeout, StatementTimeout time.Duration
}

// Resolve returns t with its zero values defaulted, or an error wrapping
// dblock.ErrInvalidOption for a negative value or a PollMax below PollMin
// (prefix names the package).
func (t Timing) Resolve(prefix string) (Timing, error) {
	if t.PollMin < 0 || t.PollMax < 0 || t.ReleaseTimeout < 0 || t.StatementTimeout < 0 {
		return t, fmt.Errorf("%s: new: %w: negative duration (poll min %v, poll max %v, release timeout %v, statement timeout %v)",
			prefix, dblock.ErrInvalidOption, t.PollMin, t.PollMax, t.ReleaseTimeout, t.StatementTimeout)
	}
	if t.StatementTimeout == 0 {
		t.StatementTimeout = StatementTimeoutDefault
	}
	if t.PollMin == 0 {
		t.PollMin = PollMinDefault
	}
	if t.PollMax == 0 {
		t.PollMax = max(PollMaxDefault, t.PollMin)
	}
	if t.PollMax < t.PollMin {
		return t, fmt.Errorf("%s: new: %w: poll max %v is below poll min %v", prefix, dblock.ErrInvalidOption, t.PollMax, t.PollMin)
	}
	if t.ReleaseTimeout == 0 {
		t.ReleaseTimeout = ReleaseTimeoutDefault
	}
	return t, nil
}
