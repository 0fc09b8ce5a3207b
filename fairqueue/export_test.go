package fairqueue

import "github.com/dblock-go/dblock/internal/handoff"

// Parked counts l's waiters of name asleep in its line, where releases can
// hand them the name.
func Parked(l *Locker, name string) int {
	l.line.mu.Lock()
	defer l.line.mu.Unlock()
	n := 0
	for _, s := range l.line.names[name] {
		if s.State == handoff.Parked {
			n++
		}
	}
	return n
}
