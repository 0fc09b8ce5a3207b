package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// The hand-written FIFO lock: the reference of the fair rows, the best a
// fair lock can do with the statements a user would write for the job
// dblock's fair queue does (a queue row per waiter, in the database so that
// waiters of every process are ordered; the name granted in the queue's
// order; every grant durable). Each acquisition joins the queue with one
// statement committed asynchronously, which also says whether the name is
// free and the waiter first; a waiter first on a free name takes it (one
// durable statement); a release hands the name, in one durable statement,
// to the first waiter, deleting its row. Waiters of this instance learn of
// their grant from the releasing goroutine (a channel), as dblock's Locker
// tells its own waiters, and of a release that freed the name from a kick;
// a waiter that hears nothing looks again after fifoLook (a grant from
// another process, which the bench never makes).
//
// Its job is easier than dblock's: no heartbeats or expiry of the queue's
// rows (a waiter that dies stays first for ever), no timeouts, no fencing
// of the waiter's own row, no re-entry, no readers.

const keyFIFO = "fifo"

// fifoLook bounds a waiter's sleep when nothing wakes it.
const fifoLook = 50 * time.Millisecond

func init() {
	register(&scenario{
		key: keyFIFO, order: 69, title: "hand-written FIFO lock (queue rows, hand-off)",
		about: "a FIFO lock in the statements a user would write: a waiters table (id, name); " +
			"the join inserts the waiter's row (committed asynchronously) and reads whether the name " +
			"is free and the waiter first; the first waiter of a free name takes it; a release hands " +
			"the name to the first waiter and deletes its row in the same durable commit " +
			"(PostgreSQL: one statement each; MariaDB: procedures). Waiters of one process are woken " +
			"by the releasing goroutine. The reference of the fair rows.",
		kinds:       []store.Kind{store.Postgres, store.MySQL},
		resetTables: []string{"bench_fifo_waiters"},
		setup: func(ctx context.Context, e *env, _ bool) (*instance, error) {
			f, err := newFIFO(ctx, e)
			if err != nil {
				return nil, err
			}
			return &instance{
				worker: func(context.Context, int) (*worker, error) {
					return &worker{acquire: f.acquire, close: func() {}}, nil
				},
				close: func() {},
			}, nil
		},
	})
}

// fifoLock is one instance's FIFO lock: the statements of its database and
// the waiters of this process, by their row's id.
type fifoLock struct {
	e      *env
	sql    fifoSQL
	mu     sync.Mutex
	wait   map[int64]chan bool // true: granted; false: the name was freed
	pre    map[int64]bool      // grants that came before their waiter registered
	byName map[string]map[int64]struct{}
	kick   map[string]uint64 // releases that freed the name, per name
	rows   map[string]bool   // names whose row exists
}

func newFIFO(ctx context.Context, e *env) (*fifoLock, error) {
	q := fifoPostgres
	if e.kind == store.MySQL {
		q = fifoMySQL
	}
	for _, s := range q.schema {
		if _, err := e.db.SQL().ExecContext(ctx, s); err != nil {
			return nil, fmt.Errorf("fifo schema: %w", err)
		}
	}
	if e.kind == store.MySQL {
		if err := fifoMySQLSchema(ctx, e); err != nil {
			return nil, err
		}
	}
	return &fifoLock{e: e, sql: q, wait: map[int64]chan bool{}, pre: map[int64]bool{},
		byName: map[string]map[int64]struct{}{}, kick: map[string]uint64{}, rows: map[string]bool{}}, nil
}

// acquire joins name's queue and waits for the name.
func (f *fifoLock) acquire(ctx context.Context, name string) (releaseFunc, error) {
	if err := f.row(ctx, name); err != nil {
		return nil, err
	}
	kicks := f.kicks(name)
	id, free, first, err := f.sql.join(ctx, f.e, name)
	if err != nil {
		return nil, err
	}
	owner := fmt.Sprintf("w%d", id)
	release := func(ctx context.Context) error { return f.release(ctx, name, owner) }
	ch, granted := f.register(name, id)
	defer f.unregister(name, id)
	if granted {
		return release, nil
	}
	look := free && first || f.kicks(name) != kicks
	for {
		if look {
			ok, err := f.sql.take(ctx, f.e, name, id, owner)
			if err != nil || ok {
				return release, err
			}
		}
		t := time.NewTimer(fifoLook)
		select {
		case g := <-ch:
			t.Stop()
			if g {
				return release, nil
			}
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		look = true
	}
}

// release hands name to its first waiter, or frees it.
func (f *fifoLock) release(ctx context.Context, name, owner string) error {
	next, err := f.sql.handOff(ctx, f.e, name, owner)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if next != 0 {
		if ch := f.wait[next]; ch != nil {
			select {
			case <-ch: // A kick it has not read: the grant replaces it.
			default:
			}
			ch <- true
		} else {
			f.pre[next] = true // Its waiter has not registered yet (or is elsewhere).
		}
		return nil
	}
	f.kick[name]++
	for id := range f.byName[name] {
		select {
		case f.wait[id] <- false:
		default:
		}
	}
	return nil
}

// row makes sure name's lock row exists, once per name.
func (f *fifoLock) row(ctx context.Context, name string) error {
	f.mu.Lock()
	ok := f.rows[name]
	f.mu.Unlock()
	if ok {
		return nil
	}
	if _, err := f.e.db.SQL().ExecContext(ctx, f.sql.row, name); err != nil {
		return fmt.Errorf("fifo row: %w", err)
	}
	f.mu.Lock()
	f.rows[name] = true
	f.mu.Unlock()
	return nil
}

func (f *fifoLock) kicks(name string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kick[name]
}

// register records the waiter id of name; granted when its grant came first.
func (f *fifoLock) register(name string, id int64) (ch chan bool, granted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pre[id] {
		delete(f.pre, id)
		return nil, true
	}
	ch = make(chan bool, 1)
	f.wait[id] = ch
	if f.byName[name] == nil {
		f.byName[name] = map[int64]struct{}{}
	}
	f.byName[name][id] = struct{}{}
	return ch, false
}

func (f *fifoLock) unregister(name string, id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.wait, id)
	delete(f.byName[name], id)
}
