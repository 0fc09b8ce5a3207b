package history_test

import (
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/reaper"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// shared: each reader's acquisition is an entry of mode read with its
// period's token (released; expired when the reaper deletes its share, or
// when a later period replaces it), the readers' period itself none; each
// semaphore grant is an entry of mode semaphore with the grant's token.
func (c *check) shared() {
	rw, err := rwlock.New(c.iso.DB, nil)
	must(c.t, err)
	defer rw.Close()
	sem, err := semaphore.New(c.iso.DB, nil)
	must(c.t, err)
	defer sem.Close()
	short := []dblock.Option{dblock.WithTTL(shortTTL), dblock.WithMaxHold(shortTTL)}

	name := locktest.RandomName("read")
	read, err := rw.AcquireRead(c.ctx, name, dblock.WithOwner("r1"))
	must(c.t, err)
	must(c.t, read.Release(c.ctx))
	c.want(c.only(name), history.Released, "r1", read.Token(), dblock.ModeRead)

	replaced := locktest.RandomName("read-replaced")
	old, err := rw.AcquireRead(c.ctx, replaced, append(short, dblock.WithOwner("r2"))...)
	must(c.t, err)
	<-old.Done()
	c.iso.WaitExpired(c.t, c.ctx, replaced)
	next, err := rw.AcquireRead(c.ctx, replaced, dblock.WithOwner("r2"))
	must(c.t, err)
	c.want(c.only(replaced), history.Expired, "r2", old.Token(), dblock.ModeRead)
	must(c.t, next.Release(c.ctx))

	reaped := locktest.RandomName("read-reaped")
	dead, err := rw.AcquireRead(c.ctx, reaped, append(short, dblock.WithOwner("r3"))...)
	must(c.t, err)
	<-dead.Done()
	c.iso.WaitExpired(c.t, c.ctx, reaped)

	semName := locktest.RandomName("sem")
	grant, err := sem.Acquire(c.ctx, semName, 2, 1, dblock.WithOwner("s1"))
	must(c.t, err)
	must(c.t, grant.Release(c.ctx))
	c.want(c.only(semName), history.Released, "s1", grant.Token(), dblock.ModeSemaphore)
	deadSem := locktest.RandomName("sem-reaped")
	lost, err := sem.Acquire(c.ctx, deadSem, 2, 1, append(short, dblock.WithOwner("s2"))...)
	must(c.t, err)
	<-lost.Done()
	for {
		st, err := sem.State(c.ctx, deadSem)
		must(c.t, err)
		if st.Used == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // past the reaper's grace, by any clock

	r, err := reaper.New(c.iso.DB, &reaper.Config{WaiterGrace: time.Millisecond})
	must(c.t, err)
	_, err = r.RunOnce(c.ctx)
	must(c.t, err)
	c.want(c.only(reaped), history.Expired, "r3", dead.Token(), dblock.ModeRead)
	c.want(c.only(deadSem), history.Expired, "s2", lost.Token(), dblock.ModeSemaphore)
}
