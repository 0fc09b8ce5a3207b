package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/faults/history"
)

// deathModes are the Locker modes registered in lockerFactories.
func deathModes() []string {
	var modes []string
	for m := range lockerFactories {
		modes = append(modes, m)
	}
	sort.Strings(modes)
	return modes
}

// TestFaultProcessDeath runs several worker processes on one name, SIGKILLs
// holders and waiters at random in a bounded loop (restarting them), then
// kills them all and checks that:
//   - no lease outlives its TTL: the name is held, by the database clock, for
//     at most TTL after the last kill, and a fresh owner gets it within TTL
//     (plus a generous 2 s for scheduling) of the last kill; a pessimistic
//     lock, which ends with its session, is free within 2 s (its idle TTL
//     is 10 s, so only the session's end can free it that fast);
//   - the recorded history (acquire/release/hold from every process, killed
//     calls as unknown outcomes, a share of acquires cut by short timeouts)
//     passes the token, overlap and porcupine checks.
func TestFaultProcessDeath(t *testing.T) {
	for _, kind := range []dialect.Kind{dialect.Postgres, dialect.MySQL, dialect.SQLite} {
		for _, mode := range deathModes() {
			// Sequential: each subtest already runs several processes.
			t.Run(string(kind)+"/"+mode, func(t *testing.T) {
				iso := dbtest.New(t, kind)
				processDeath(t, iso, mode)
			})
		}
	}
}

func processDeath(t *testing.T, iso *dbtest.Isolated, mode string) {
	const (
		workers = 4
		rounds  = 8
	)
	ttl := time.Second
	// A dead holder's lease lasts its TTL; a pessimistic lock ends with the
	// holder's session, so it must be free long before its (idle) TTL.
	bound := ttl + 2*time.Second
	if mode == dblock.ModePessimistic {
		ttl, bound = 10*time.Second, 2*time.Second
	}
	name := "death-" + mode
	dir := t.TempDir()
	env := func() map[string]string {
		return map[string]string{
			"FAULTS_DSN": iso.DSN, "FAULTS_MODE": mode, "FAULTS_NAME": name,
			"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "90s", "FAULTS_CUT": "0.1",
		}
	}
	var files []string
	start := func(id string) *proc {
		e := env()
		f := filepath.Join(dir, id+".jsonl")
		files = append(files, f)
		e["FAULTS_HISTORY"] = f
		return startWorker(t, id, e)
	}
	procs := make([]*proc, workers)
	next := 0
	for i := range procs {
		procs[i] = start(fmt.Sprintf("w%d", next))
		next++
	}
	kills := 0
	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
		i := rand.IntN(workers)
		if !procs[i].alive() {
			t.Fatalf("worker exited on its own: %v", procs[i].err)
		}
		procs[i].kill()
		kills++
		procs[i] = start(fmt.Sprintf("w%d", next))
		next++
	}
	time.Sleep(300 * time.Millisecond)
	for _, p := range procs {
		if !p.alive() {
			t.Fatalf("worker exited on its own: %v", p.err)
		}
		p.kill()
		kills++
	}
	lastKill := time.Now()

	// No lease outlives its TTL by the database clock.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := iso.DB.LeaseHolder(ctx, nil, name)
	if err != nil {
		t.Fatalf("read holder: %v", err)
	}
	if h.Held() && mode != dblock.ModePessimistic {
		if left := h.ExpiresAt.Sub(h.Now); left > ttl+50*time.Millisecond {
			t.Errorf("after the last kill the lease has %v left, more than its TTL %v", left, ttl)
		}
	}
	// A fresh owner gets the name once the dead holder's lease ran out (or,
	// pessimistic, once its session ended).
	owner := dblock.NewOwner()
	var got bool
	for time.Since(lastKill) < bound+2*time.Second {
		actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := iso.DB.AcquireLease(actx, nil, dialect.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Minute})
		acancel()
		if err != nil {
			t.Fatalf("acquire after the kills: %v", err)
		}
		if res.Acquired {
			got = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	waited := time.Since(lastKill)
	if !got || waited > bound {
		t.Fatalf("name still locked %v after the last kill (bound %v, TTL %v); acquired=%v", waited, bound, ttl, got)
	}
	if mode == dblock.ModeFair {
		checkQueueDrained(t, iso, name)
	}

	recs, err := history.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	ops := history.Ops(recs)
	sum := history.Summarize(ops)
	t.Logf("%d kills; history: %v; free %v after the last kill", kills, sum, waited.Round(time.Millisecond))
	if sum.Granted < 10 {
		t.Fatalf("only %d acquisitions granted: the workers did not make progress", sum.Granted)
	}
	res, err := history.Check(ops, 30*time.Second)
	if err != nil {
		t.Fatalf("history check: %v", err)
	}
	if res == porcupine.Unknown {
		t.Logf("porcupine: no verdict within 30 s (the O(n) checks passed)")
	}
}
