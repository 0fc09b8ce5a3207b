package reaper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// Readers and a semaphore holder that die (their leases run out, nobody
// releases): the pass frees the names the readers held (one read by two
// readers, whose shares it deletes, one by a single reader, which
// PostgreSQL and MariaDB record in the name's row), deletes the grant, and later the
// idle semaphore; a live reader is kept.
func TestPassClearsDeadSharedHolders(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		short := []dblock.Option{dblock.WithTTL(200 * time.Millisecond), dblock.WithMaxHold(200 * time.Millisecond)}
		rw, err := rwlock.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		rw2, err := rwlock.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rw2.Close()
		sem, err := semaphore.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sem.Close()
		dead, err := rw.TryAcquireRead(ctx, randomName("dead-reader"), short...)
		if err != nil {
			t.Fatal(err)
		}
		dead2, err := rw2.TryAcquireRead(ctx, dead.Name(), short...)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := rw.TryAcquireRead(ctx, randomName("dead-reader-alone"), short...)
		if err != nil {
			t.Fatal(err)
		}
		live, err := rw.TryAcquireRead(ctx, randomName("live-reader"))
		if err != nil {
			t.Fatal(err)
		}
		semName := randomName("sem")
		grant, err := sem.TryAcquire(ctx, semName, 2, 1, short...)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []*dblock.Lease{dead, dead2, alone, grant} {
			<-l.Done()
		}
		// Done fires at the local deadline, counted from the request's
		// start; the database's expiry counts from its statement, later by
		// the round trip (a loaded host: tens of milliseconds). Wait for the
		// database's clock to pass both, and the grace.
		untilExpired(t, iso.DB, "dblock_shares", dead.Name(), 2*time.Millisecond)
		untilExpired(t, iso.DB, "dblock_locks", alone.Name(), 2*time.Millisecond)
		untilExpired(t, iso.DB, "dblock_permits", semName, 2*time.Millisecond)

		r := newReaper(t, iso.DB, &Config{WaiterGrace: time.Millisecond, Retention: time.Hour})
		st := runOnce(t, r)
		shares := 2 // The two readers of one name; PostgreSQL and MariaDB record the reader alone in its name's row.
		if iso.Kind == store.SQLite {
			shares = 3 // And the reader alone's.
		}
		if st.ExpiredFreed < 2 || st.SharesDeleted != shares || st.GrantsDeleted != 1 || st.SemaphoresDeleted != 0 {
			t.Fatalf("pass %+v: want the dead readers' names freed, %d shares and the grant deleted, the semaphore kept", st, shares)
		}
		for _, l := range []*dblock.Lease{dead, dead2, alone, grant} {
			if !errors.Is(l.Err(), dblock.ErrExpired) {
				t.Fatalf("dead holder's Err on %s: %v", l.Name(), l.Err())
			}
		}
		if live.Err() != nil {
			t.Fatalf("live reader lost: %v", live.Err())
		}
		for _, name := range []string{dead.Name(), alone.Name()} {
			w, err := rw.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("write after the dead readers were cleared: %v", err)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := live.Release(ctx); err != nil {
			t.Fatal(err)
		}

		exec(t, iso.DB, "UPDATE dblock_semaphores SET updated_at = "+shifted(iso.DB, 1), (-2 * time.Hour).Microseconds())
		st = runOnce(t, r)
		if st.SemaphoresDeleted != 1 {
			t.Fatalf("pass %+v: want the idle semaphore deleted", st)
		}
		if s, err := sem.State(ctx, semName); err != nil || s.Exists {
			t.Fatalf("semaphore after the pass: %+v, %v", s, err)
		}
	})
}
