package wake

import "time"

// SetMarkFor sets the lifetime of h's marks of listening (before its first
// subscription).
func SetMarkFor(h *Hub, d time.Duration) { h.marks.d = d }
