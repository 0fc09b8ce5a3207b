package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/faults/history"
	"github.com/dblock-go/dblock/internal/store"
)

// ack is an acknowledged acquisition: call is when it was sent, at when
// it was acknowledged.
type ack struct {
	name, owner string
	token       dblock.Token
	at, call    time.Time
}

// failoverResult is what one failover trial measured.
type failoverResult struct {
	acked, ackedAfter, lost, unknown int
	// hot is the history of the shared name; hotAfter counts its grants
	// whose acquire started after the promotion.
	hot      []history.Op
	hotAfter int
	// maxBefore is the highest hot token acknowledged before the kill,
	// minAfter the lowest acknowledged for an acquire that started after
	// the promotion (0 when none).
	maxBefore, minAfter int64
	// releasesUnsure counts acknowledged releases of the shared name that
	// no later synchronous commit made durable before the kill;
	// releasesUndone those the promoted standby did not have.
	releasesUnsure, releasesUndone int
	tokensBackwards                error
}

// failoverTrial builds a primary and a standby (synchronous with
// remote_apply, or asynchronous), runs acquisitions through a multi-host DSN
// (target_session_attrs=read-write), SIGKILLs the primary, promotes the
// standby, lets the clients reconnect and continue, and then checks every
// acknowledged acquisition against the new primary.
//
// With partition, the replication link (through a toxiproxy) is blackholed
// for 500 ms before the kill: an asynchronous primary goes on acknowledging
// acquisitions the standby never receives; a synchronous one waits.
func failoverTrial(t *testing.T, syncRep, partition bool) failoverResult {
	settings := []string{
		"wal_level = replica", "max_wal_senders = 5", "wal_keep_size = 64MB",
	}
	state := "async"
	if syncRep {
		settings = append(settings, "synchronous_standby_names = 'FIRST 1 (standby1)'", "synchronous_commit = remote_apply")
		state = "sync"
	}
	primary := newPrimary(t, settings...)
	repl := startProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.port))
	standby := newStandby(t, primary, "standby1", repl.px.Listen)
	pdb := openPG(t, primary.DSN())
	waitReplication(t, pdb, "standby1", state)
	migrate(t, pdb)
	_ = pdb.Close()

	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=1",
		primary.port, standby.port)
	client := openPG(t, multi)

	var (
		mu      sync.Mutex
		acks    []ack
		unknown atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	hotRecs := make([]*history.Recorder, 2)
	// The second worker on the shared name is a candidate of an election
	// called "hot": its terms go into the same history as the first
	// worker's leases, so the checks cover elected terms too.
	candidate, err := election.New(client, "hot", &election.Config{TTL: hotTTL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer candidate.Close()
	for w := range 3 {
		if w < 2 {
			hotRecs[w], _ = history.NewRecorder(fmt.Sprintf("hot%d", w), "")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A unique name, never released: it must survive the failover.
				name := fmt.Sprintf("k-%d-%d", w, i)
				owner := dblock.NewOwner()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				call := time.Now()
				res, err := store.Of(client).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Hour})
				cancel()
				switch {
				case err != nil:
					unknown.Add(1)
					time.Sleep(20 * time.Millisecond)
				case res.Acquired:
					mu.Lock()
					acks = append(acks, ack{name, owner, res.Token, time.Now(), call})
					mu.Unlock()
				}
				switch w {
				case 0:
					hotCycle(client, hotRecs[w])
				case 1:
					electionCycle(candidate, hotRecs[w])
				}
			}
		}()
	}
	time.Sleep(time.Duration(700+rand.IntN(600)) * time.Millisecond)
	if partition {
		heal := repl.partition(t)
		time.Sleep(500 * time.Millisecond)
		defer heal()
	}
	primary.kill(t)
	killedAt := time.Now()
	if err := standby.ctl("-w", "-t", "30", "promote"); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("promote: %v", err)
	}
	newPrimary := openPG(t, standby.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	// The promoted standby inherited synchronous_standby_names: without this
	// its first write would wait for a standby that does not exist.
	_, err = newPrimary.SQL().ExecContext(ctx, "ALTER SYSTEM SET synchronous_standby_names = ''")
	if err == nil {
		_, err = newPrimary.SQL().ExecContext(ctx, "SELECT pg_reload_conf()")
	}
	cancel()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("reconfigure the promoted standby: %v", err)
	}
	// The shared name as the promoted standby has it, before clients write
	// there.
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	hotAtPromotion, err := store.Of(newPrimary).LeaseHolder(hctx, nil, "hot")
	hcancel()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("read the shared name on the promoted standby: %v", err)
	}
	promotedAt := time.Now()
	// Long enough for a hot lease whose release the kill cut (TTL
	// hotTTL from its acquire, before the kill) to run out, and for
	// clients to take the name again.
	time.Sleep(hotTTL + time.Second)
	close(stop)
	wg.Wait()

	var r failoverResult
	r.unknown = int(unknown.Load())
	mu.Lock()
	defer mu.Unlock()
	r.acked = len(acks)
	for _, a := range acks {
		if a.at.After(promotedAt) {
			r.ackedAfter++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := store.Of(newPrimary).LeaseHolder(ctx, nil, a.name)
		cancel()
		if err != nil {
			t.Fatalf("read %s on the new primary: %v", a.name, err)
		}
		if !h.Exists || h.Owner != a.owner || h.Version != int64(a.token) {
			r.lost++
		}
	}
	var hotRecords []history.Record
	for _, rec := range hotRecs {
		hotRecords = append(hotRecords, rec.Records()...)
	}
	r.hot = history.Ops(hotRecords)
	// A release commits asynchronously on PostgreSQL (synchronous_commit
	// = off: a lost release only keeps the name until its lease
	// expires), so an acknowledged release is durable only once a later
	// synchronous commit (any acknowledged acquisition sent after it
	// returned, the WAL being sequential) reached the standby. Releases
	// acknowledged after the last such acquisition before the kill may be
	// undone by the failover: for the history they are unknown outcomes.
	var lastSyncCall int64
	for _, a := range acks {
		if a.at.Before(killedAt) && a.call.UnixNano() > lastSyncCall {
			lastSyncCall = a.call.UnixNano()
		}
	}
	for _, op := range r.hot {
		if op.Kind == history.Acquire && op.Outcome == history.OK && op.Ret < killedAt.UnixNano() && op.Call > lastSyncCall {
			lastSyncCall = op.Call
		}
	}
	for i, op := range r.hot {
		if op.Kind == history.Release && op.Outcome == history.OK && op.Call < killedAt.UnixNano() && op.Ret >= lastSyncCall {
			r.hot[i].Outcome, r.hot[i].Ret = history.Unknown, math.MaxInt64
			r.releasesUnsure++
			if hotAtPromotion.Held() && hotAtPromotion.Version == op.Token {
				r.releasesUndone++
			}
		}
	}
	r.tokensBackwards = history.CheckTokens(r.hot)
	for _, op := range r.hot {
		if op.Kind != history.Acquire || op.Outcome != history.OK {
			continue
		}
		if op.Ret < killedAt.UnixNano() && op.Token > r.maxBefore {
			r.maxBefore = op.Token
		}
		if op.Call > promotedAt.UnixNano() {
			r.hotAfter++
			if r.minAfter == 0 || op.Token < r.minAfter {
				r.minAfter = op.Token
			}
		}
	}
	if partition {
		state += " partitioned"
	}
	t.Logf("%s failover: %d acquisitions acknowledged (%d after promotion), %d lost, %d unknown outcomes; promoted %v after the kill; "+
		"shared name: %v, %d granted after promotion, highest token before the kill %d, lowest after promotion %d, "+
		"%d acknowledged releases not yet durable at the kill, %d of them undone by the failover",
		state, r.acked, r.ackedAfter, r.lost, r.unknown, promotedAt.Sub(killedAt).Round(time.Millisecond),
		history.Summarize(r.hot), r.hotAfter, r.maxBefore, r.minAfter, r.releasesUnsure, r.releasesUndone)
	return r
}

// hotTTL is the lease of the shared name: short, so an acquire or release
// whose outcome the kill made unknown leaves the name held for at most this
// long, and later acquisitions show whether fencing survived the failover.
const hotTTL = 2 * time.Second

// hotCycle acquires and releases the shared name "hot" once, recording it.
func hotCycle(db *dialect.DB, rec *history.Recorder) {
	const ttl = hotTTL
	owner := dblock.NewOwner()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id := rec.Call(history.Acquire, "hot", ttl, 0)
	res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: "hot", Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
	switch {
	case err != nil:
		rec.Return(id, history.Acquire, "hot", 0, history.Unknown, err)
		return
	case !res.Acquired && res.Holder.Owner == "":
		// Another transaction held the row: an acquisition waiting for
		// the synchronous standby, which the failover may then undo.
		rec.Return(id, history.Acquire, "hot", 0, history.Refused, nil)
		return
	case !res.Acquired:
		rec.Return(id, history.Acquire, "hot", 0, history.Busy, nil)
		return
	}
	rec.Return(id, history.Acquire, "hot", int64(res.Token), history.OK, nil)
	id = rec.Call(history.Release, "hot", 0, int64(res.Token))
	ok, err := store.Of(db).ReleaseLease(ctx, nil, "hot", owner, res.Token)
	switch {
	case err != nil:
		rec.Return(id, history.Release, "hot", int64(res.Token), history.Unknown, err)
	case ok:
		rec.Return(id, history.Release, "hot", int64(res.Token), history.OK, nil)
	default:
		rec.Return(id, history.Release, "hot", int64(res.Token), history.NotHeld, nil)
	}
}

// electionCycle campaigns for the election "hot" (for 2 s at most) and
// resigns, recording both as an acquire and a release of the name.
func electionCycle(e *election.Election, rec *history.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id := rec.Call(history.Acquire, "hot", hotTTL, 0)
	term, err := e.Campaign(ctx, "candidate")
	if err != nil {
		var held *dblock.HeldError
		if errors.As(err, &held) && held.Owner != "" {
			rec.Return(id, history.Acquire, "hot", 0, history.Busy, nil)
		} else {
			rec.Return(id, history.Acquire, "hot", 0, history.Unknown, err)
		}
		return
	}
	tok := int64(term.Token())
	rec.Return(id, history.Acquire, "hot", tok, history.OK, nil)
	id = rec.Call(history.Release, "hot", 0, tok)
	was, err := e.Resign(ctx)
	switch {
	case err != nil:
		rec.Return(id, history.Release, "hot", tok, history.Unknown, err)
	case was:
		rec.Return(id, history.Release, "hot", tok, history.OK, nil)
	default:
		rec.Return(id, history.Release, "hot", tok, history.NotHeld, nil)
	}
}

// failoverTrials: a plain kill, then two kills after a 500 ms
// replication partition.
var failoverTrials = []bool{false, true, true}

// TestFaultFailoverSync: with a synchronous standby (remote_apply), every
// acknowledged acquisition is on the promoted standby, fencing tokens of the
// shared name never go backwards, and clients reconnect and go on acquiring.
func TestFaultFailoverSync(t *testing.T) {
	total, lost := 0, 0
	for i, partition := range failoverTrials {
		t.Run(fmt.Sprintf("trial%d_partition=%v", i, partition), func(t *testing.T) {
			r := failoverTrial(t, true, partition)
			total += r.acked
			lost += r.lost
			if r.lost != 0 {
				t.Errorf("synchronous failover lost %d of %d acknowledged acquisitions", r.lost, r.acked)
			}
			if r.tokensBackwards != nil {
				t.Errorf("fencing tokens across the failover: %v", r.tokensBackwards)
			}
			if r.ackedAfter == 0 {
				t.Errorf("no acquisition was acknowledged after the promotion: clients did not reconnect")
			}
			// The shared name: granted again after the promotion, with
			// tokens above everything acknowledged before the kill, and a
			// linearizable history (unknown outcomes at the kill included).
			if r.hotAfter == 0 {
				t.Errorf("the shared name was never granted after the promotion (%v)", history.Summarize(r.hot))
			} else if r.minAfter <= r.maxBefore {
				t.Errorf("fencing went backwards across the failover: token %d granted after the promotion, %d acknowledged before the kill",
					r.minAfter, r.maxBefore)
			}
			checkHistory(t, r.hot, "shared name across the failover")
		})
	}
	t.Logf("synchronous standby: %d lost of %d acknowledged acquisitions over %d failovers", lost, total, len(failoverTrials))
}

// TestFaultFailoverAsync measures the same failovers with an asynchronous
// standby. Losses are expected there and only reported (documentation, not a
// pass/fail criterion); the test fails only if clients cannot continue.
func TestFaultFailoverAsync(t *testing.T) {
	var counts []string
	for i, partition := range failoverTrials {
		t.Run(fmt.Sprintf("trial%d_partition=%v", i, partition), func(t *testing.T) {
			r := failoverTrial(t, false, partition)
			counts = append(counts, fmt.Sprintf("%d/%d", r.lost, r.acked))
			if r.tokensBackwards != nil {
				t.Logf("asynchronous failover: fencing tokens went backwards: %v", r.tokensBackwards)
			}
			if r.ackedAfter == 0 {
				t.Errorf("no acquisition was acknowledged after the promotion: clients did not reconnect")
			}
		})
	}
	t.Logf("asynchronous standby: lost/acknowledged acquisitions per trial (plain, partitioned, partitioned): %v", counts)
}
