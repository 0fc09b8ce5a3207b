package recent

import (
	"sync"
	"time"
)

// Max bounds the names remembered; past it the memory starts over (a hint
// lost, never a scan of the map).
const Max = 4096

// Names maps a name to when it was last marked. The zero value is ready;
// it is safe for concurrent use.
type Names struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Mark records name now.
func (n *Names) Mark(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.at == nil || len(n.at) >= Max {
		n.at = make(map[string]time.Time, 64)
	}
	n.at[name] = time.Now()
}

// Within reports whether name was marked less than d ago.
func (n *Names) Within(name string, d time.Duration) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.at[name]
	return ok && time.Since(at) < d
}

// Forget drops name's mark.
func (n *Names) Forget(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.at, name)
}
