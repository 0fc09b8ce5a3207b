package main

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// keepAliveTimeout bounds one keep-alive statement: one that takes longer
// is interrupted, which closes the holding connection (the drivers close a
// connection whose statement's context ends), and the hold is then lost.
// It only bounds a server that stopped answering.
const keepAliveTimeout = 5 * time.Second

// keepAliveEvery is how often the keep-alive runs against a server's idle
// bound: a quarter of it, so that a statement may run three quarters of the
// bound late (a loaded machine's scheduling pause: with the 2 s floor of
// MySQL and MariaDB, 1.5 s) before the server ends a live hold.
func keepAliveEvery(bound time.Duration) time.Duration {
	return max(bound/4, time.Millisecond)
}

// keepAlive runs a trivial statement on a pessimistic hold's transaction
// every so often while CMD runs, so that the server's idle bound, meant for
// a frozen client, never ends the hold of a live one.
type keepAlive struct {
	tx    *sql.Tx
	stmt  string // "SELECT 1"
	every time.Duration
	lost  <-chan struct{} // The lease's Done: nothing left to keep alive.

	// Tests only: before runs before each statement (to make it late),
	// after with its error.
	before func()
	after  func(error)
}

// start starts the keep-alive and returns its stop, which waits for it to
// end. stop never interrupts a statement under way: it waits for it (up to
// keepAliveTimeout), since interrupting it would close the holding
// connection and lose the hold that CMD just finished under.
func (k keepAlive) start() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(k.every)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-k.lost:
				return
			case <-tick.C:
			}
			select {
			case <-quit: // Stopped while the tick was due: run nothing more.
				return
			default:
			}
			if k.before != nil {
				k.before()
			}
			// A failure is left to the pessimistic locker, which notices a
			// dead session and reports the loss.
			ctx, cancel := context.WithTimeout(context.Background(), keepAliveTimeout)
			_, err := k.tx.ExecContext(ctx, k.stmt)
			cancel()
			if k.after != nil {
				k.after(err)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
