package pessimistic

import (
	"context"
	"errors"
)

// gate queues the goroutines of this process that want one name.
type gate struct {
	ch   chan struct{}
	refs int
}

// errHeldHere is the cause when TryAcquire finds the name taken (or being
// taken) by another goroutine of this process.
var errHeldHere = errors.New("held or being acquired in this process")

func (l *Locker) enterGate(ctx context.Context, key string, try bool) error {
	l.mu.Lock()
	g := l.gates[key]
	if g == nil {
		g = l.newGate()
		l.gates[key] = g
	}
	g.refs++
	l.mu.Unlock()
	if try {
		select {
		case g.ch <- struct{}{}:
			return nil
		default:
			l.unrefGate(key, g)
			return errHeldHere
		}
	}
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		l.unrefGate(key, g)
		return context.Cause(ctx)
	}
}

func (l *Locker) leaveGates(keys []string) {
	for _, k := range keys {
		l.mu.Lock()
		g := l.gates[k]
		l.mu.Unlock()
		<-g.ch
		l.unrefGate(k, g)
	}
}

func (l *Locker) unrefGate(key string, g *gate) {
	l.mu.Lock()
	if g.refs--; g.refs == 0 {
		delete(l.gates, key)
		if len(l.freeGates) < maxFreeGates {
			// Unreferenced, so empty: every goroutine that entered left.
			l.freeGates = append(l.freeGates, g)
		}
	}
	l.mu.Unlock()
}

// maxFreeGates bounds the gates kept for reuse: a gate lives only while a
// goroutine holds or wants its name, so an uncontended acquisition would
// otherwise make one (and its channel) each time.
const maxFreeGates = 64

// newGate returns a free gate; l.mu is held.
func (l *Locker) newGate() *gate {
	if n := len(l.freeGates); n > 0 {
		g := l.freeGates[n-1]
		l.freeGates = l.freeGates[:n-1]
		return g
	}
	return &gate{ch: make(chan struct{}, 1)}
}

// openGates lets the next goroutine of this process in, once, when h ends or
// is lost.
func (l *Locker) openGates(h *hold) {
	l.mu.Lock()
	keys := h.gates
	h.gates = nil
	l.mu.Unlock()
	l.leaveGates(keys)
}
