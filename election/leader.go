package election

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
)

// Leader is the holder of an election's office as the database saw it.
type Leader struct {
	// Value is what the leader campaigned with or last proclaimed.
	Value string
	// Term is the term number: the fencing token of the leader's lease.
	Term dblock.Token
	// Owner identifies the leader's term (a fresh identity per Campaign).
	Owner string
	// Since is when the term began, by the database clock.
	Since time.Time
	// ExpiresAt is when the term ends unless renewed, by the database clock.
	ExpiresAt time.Time
}

// Leader returns the current leader, read in one statement. With no
// leader (none elected yet, or the last term resigned or expired by the
// database clock) the error wraps ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	rows, err := e.db.ListLocks(ctx, []string{e.name})
	if err != nil {
		return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, err)
	}
	for _, r := range rows {
		if r.Name == e.name && r.ExpiresAt.After(r.Now) {
			return Leader{Value: r.Metadata, Term: dblock.Token(r.Token), Owner: r.Owner, Since: r.AcquiredAt, ExpiresAt: r.ExpiresAt}, nil
		}
	}
	return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, ErrNoLeader)
}

// after reports whether l comes after base in an observer's stream (nil:
// nothing yet): a later term, or a new value proclaimed in the same term.
func (l Leader) after(base *Leader) bool {
	return base == nil || l.Term > base.Term || l.Term == base.Term && l.Value != base.Value
}

// Observe streams the election's leaders: the current one when there is
// one, then every change it sees, read every Config.ObserveInterval. Terms
// come in increasing order, and within a term each new value proclaimed;
// terms that begin and end between two reads are skipped, and a reader that
// falls behind receives the latest leader, never an older one. With no
// leader nothing is sent. The channel is closed when ctx ends or the
// Election is closed.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	o := &observer{e: e, ctx: ctx, out: ch}
	e.observers.Add(1)
	go o.run()
	return ch
}

// observer is one Observe stream: it reads the leader on a ticker and hands
// the newest one not yet delivered to its reader.
type observer struct {
	e       *Election
	ctx     context.Context
	out     chan<- Leader
	last    *Leader // The last leader delivered (nil: none yet).
	pending *Leader // The newest leader read and not delivered yet.
}

func (o *observer) run() {
	defer o.e.observers.Done()
	defer close(o.out)
	tick := time.NewTicker(o.e.cfg.ObserveInterval)
	defer tick.Stop()
	o.read()
	for {
		var send chan<- Leader
		var next Leader
		if o.pending != nil {
			send, next = o.out, *o.pending
		}
		select {
		case send <- next:
			o.last, o.pending = o.pending, nil
		case <-tick.C:
			o.read()
		case <-o.ctx.Done():
			return
		case <-o.e.closing:
			return
		}
	}
}

// read reads the leader and keeps it as pending when it is newer than what
// was delivered and than what is pending; a failed read is skipped (the
// next tick reads again).
func (o *observer) read() {
	l, err := o.e.Leader(o.ctx)
	if err != nil {
		return
	}
	if o.last != nil && !l.after(o.last) {
		o.pending = nil // Nothing newer than what the reader has.
		return
	}
	base := o.last
	if o.pending != nil {
		base = o.pending
	}
	if l.after(base) {
		o.pending = &l
	}
}
