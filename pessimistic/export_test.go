package pessimistic

import (
	"context"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// TestHooks let tests order events between Lockers: BeforeBegin runs in an
// acquisition attempt before its transaction begins (on SQLite after its
// fencing tokens were issued), Watched after each pass of the session
// watcher that asked the server. Either may be nil.
type TestHooks struct {
	BeforeBegin func(names []string)
	Watched     func(err error)
}

// SetTestHooks installs hooks on l; call it before l is used.
func SetTestHooks(l *Locker, h TestHooks) {
	l.hooks4test = testHooks{beforeBegin: h.BeforeBegin, watched: h.Watched}
}

// EndWaitOf arms what ends an abandoned lock wait (endWaitOnDone) for the
// server session id, which was read just now, and fires it at once, as if
// the caller's context had ended before the lock statement started.
// discarded: the session's connection is not used again. Call the returned
// finished once the statement has returned.
func EndWaitOf(l *Locker, id int64, discarded bool) (finished func() bool) {
	ctx, cancel := context.WithCancel(context.Background())
	e := l.endWaitOnDone(ctx, waitSession{id: id, readAt: time.Now(), discarded: discarded}, []string{"abandoned"})
	cancel()
	return e.finished
}

// GiveConnTwice gives conn back through two holds' ends at once, as a lost
// hold's background teardown and its caller's Release may (one destroying
// it, one returning it), and waits for both.
func GiveConnTwice(conn *sqlx.Conn) {
	h := &hold{conn: conn}
	var wg sync.WaitGroup
	for _, destroy := range []bool{true, false} {
		wg.Go(func() { h.giveConn(destroy) })
	}
	wg.Wait()
}

// SetEndBound sets the bound of the commit or rollback that ends l's Do
// transactions (cleanupTimeout); call it before l is used.
func SetEndBound(l *Locker, d time.Duration) { l.endBound = d }
