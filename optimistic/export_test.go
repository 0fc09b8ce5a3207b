package optimistic

import "github.com/dblock-go/dblock/internal/handoff"

// Parked counts l's waiters of name asleep in its line, where releases can
// hand them the name.
func Parked(l *Locker, name string) int { return inState(l, name, handoff.Parked) }

// Claimed counts l's waiters of name that a release is handing the name to.
func Claimed(l *Locker, name string) int { return inState(l, name, handoff.Claimed) }

// inState counts l's waiters of name whose slot for releases is in state s.
func inState(l *Locker, name string, s handoff.State) int {
	l.gates.mu.Lock()
	defer l.gates.mu.Unlock()
	n := 0
	if ln := l.gates.m[name]; ln != nil {
		for _, w := range ln.q {
			if w.hand.State == s {
				n++
			}
		}
	}
	return n
}

// Handed counts the hand-offs l's releases did.
func Handed(l *Locker) uint64 { return l.gates.handed.Load() }
