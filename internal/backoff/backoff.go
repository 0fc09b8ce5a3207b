package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter returns a random duration in [d/2, d]: pauses of many clients
// retrying together spread out instead of meeting again.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// JitterUp returns a random duration in [d, 3d/2]: a pause of at least d,
// spread as Jitter's are.
func JitterUp(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d + rand.N(d/2+1)
}

// UntilExpiry caps the pause d at the time left until expires, by the
// database clock now, plus a millisecond (so that the wake-up finds the
// lease expired). Unknown times (zero) leave d as it is.
func UntilExpiry(d time.Duration, expires, now time.Time) time.Duration {
	if expires.IsZero() || now.IsZero() {
		return d
	}
	if rem := expires.Sub(now) + time.Millisecond; rem < d {
		return max(rem, 0)
	}
	return d
}
