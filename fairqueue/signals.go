package fairqueue

import (
	"sync"
	"sync/atomic"
)

// signals are this Locker's own queue events per name (a release of the
// lock, a waiter leaving), delivered to its waiters without a database round
// trip. Takes are not events: a waiter moving from the queue to the lock
// changes nobody's turn until it releases.
type signals struct {
	mu   sync.Mutex
	subs map[string]map[*signal]struct{}
}

// signal counts the events of one name's queue seen by one waiter; ch is
// buffered one deep and never blocks the sender.
type signal struct {
	events   atomic.Uint64 // releases and leaves
	releases atomic.Uint64
	ch       chan struct{}
}

// Event kinds of signals.notify.
const (
	eventRelease = iota // The lock was released.
	eventLeave          // A waiter left the queue (gave up, or requeued).
)

func (s *signals) subscribe(name string) *signal {
	sig := &signal{ch: make(chan struct{}, 1)}
	s.mu.Lock()
	m := s.subs[name]
	if m == nil {
		m = map[*signal]struct{}{}
		s.subs[name] = m
	}
	m[sig] = struct{}{}
	s.mu.Unlock()
	return sig
}

// waiting reports whether a waiter of this Locker waits in name's queue.
func (s *signals) waiting(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs[name]) > 0
}

func (s *signals) unsubscribe(name string, sig *signal) {
	s.mu.Lock()
	if m := s.subs[name]; m != nil {
		delete(m, sig)
		if len(m) == 0 {
			delete(s.subs, name)
		}
	}
	s.mu.Unlock()
}

// notify counts an event of name's queue and wakes its waiters.
func (s *signals) notify(name string, kind int) {
	s.mu.Lock()
	for sig := range s.subs[name] {
		sig.events.Add(1)
		if kind == eventRelease {
			sig.releases.Add(1)
		}
		select {
		case sig.ch <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}
