package main

import (
	"context"
	"slices"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// releaseFunc ends one hold.
type releaseFunc func(ctx context.Context) error

// worker is one goroutine's client: its acquire returns once name is held
// (waiting when contended) and hands back the matching release.
type worker struct {
	acquire func(ctx context.Context, name string) (releaseFunc, error)
	close   func()
	// holdTimes, when set, reports when the last hold really began and
	// when its release began, for callback forms whose acquire returns
	// only after the release (pessimistic Do).
	holdTimes func() (held, releasing time.Time)
	// queued, when set, reports the last acquisition's fencing token and
	// when it joined the queue (µs by the database clock; 0 when it took
	// the name without queueing), for FIFO checks in the queue's order.
	queued func() (token, joined int64)
}

// instance is a scenario set up on one database for one cell: a locker, a
// peer client or nothing for hand-written SQL.
type instance struct {
	// worker returns goroutine g's client.
	worker func(ctx context.Context, g int) (*worker, error)
	close  func()
}

// scenario is one row of the tables.
type scenario struct {
	key   string
	order int
	title string
	about string       // one line for the README
	kinds []store.Kind // nil: every database
	// missing, when set, says why the scenario cannot run in this build
	// (its package has not landed yet).
	missing string
	// setup prepares an instance for one cell (contended: 8 goroutines on
	// one name, so acquire must wait rather than fail).
	setup func(ctx context.Context, e *env, contended bool) (*instance, error)
	// resetTables names extra tables to empty between cells.
	resetTables []string
	// shared: holds of one name may overlap (readers, a semaphore's
	// permits), so the contended cell counts no overlaps.
	shared bool
}

func (s *scenario) runsOn(k store.Kind) bool {
	return s.kinds == nil || slices.Contains(s.kinds, k)
}

var registry = map[string]*scenario{}

// register adds s, replacing a placeholder of the same key.
func register(s *scenario) { registry[s.key] = s }

// Scenario keys.
const (
	keyFloor      = "floor"
	keyForUpdate  = "forupdate"
	keySession    = "session"
	keyOptTry     = "opt-try"
	keyOptAcquire = "opt-acquire"
	keyPessimist  = "pess-do"
	keyFair       = "fair"
	keyPglock     = "pglock"
)

// Placeholders for dblock packages not yet in this build; the adapter files
// (optimistic.go, pessimistic.go, fair.go) replace them in their init.
func init() {
	for _, s := range []*scenario{
		{key: keyOptTry, order: 40, title: "dblock optimistic TryAcquire+Release (TTL 30s, no renewal)",
			missing: "package optimistic not available in this build"},
		{key: keyOptAcquire, order: 50, title: "dblock optimistic Acquire+Release (defaults: 30s, renewed)",
			missing: "package optimistic not available in this build"},
		{key: keyPessimist, order: 60, title: "dblock pessimistic Do (callback, empty fn)",
			missing: "package pessimistic not available in this build"},
		{key: keyFair, order: 70, title: "dblock fair Acquire+Release",
			missing: "package fairqueue not available in this build"},
	} {
		if _, ok := registry[s.key]; !ok {
			register(s)
		}
	}
}

// ordered returns the scenarios in table order.
func ordered() []*scenario {
	out := make([]*scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *scenario) int { return a.order - b.order })
	return out
}
