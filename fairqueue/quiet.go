package fairqueue

import (
	"sync"
	"time"
)

// quietAfter is how long after meeting a holder or a queue on a name a
// Locker keeps looking at the queue before its direct acquisitions of that
// name (see store.AcquireParams.QueueQuiet).
const quietAfter = time.Second

// quietMax bounds the names remembered; past it the stale ones are dropped.
const quietMax = 4096

// quietNames remembers when this Locker last met a holder or a queue on a
// name. A name it has not met one on lately is quiet: on MySQL its direct
// acquisition skips the look at the queue (one statement less), and the
// check after the acquisition keeps the queue's order.
type quietNames struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// quiet reports whether name met no holder or queue in the last quietAfter.
func (q *quietNames) quiet(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	at, ok := q.seen[name]
	return !ok || time.Since(at) > quietAfter
}

// contended records that name met a holder or a queue now.
func (q *quietNames) contended(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seen == nil {
		q.seen = map[string]time.Time{}
	}
	if len(q.seen) >= quietMax {
		for n, at := range q.seen {
			if time.Since(at) > quietAfter {
				delete(q.seen, n)
			}
		}
	}
	q.seen[name] = time.Now()
}
