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
