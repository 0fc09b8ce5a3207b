package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/faults/history"
	"github.com/dblock-go/dblock/internal/store"
)

// A worker is a process (the test binary re-executed with FAULTS_WORKER set)
// that acquires one name in a loop, holds it briefly while confirming in its
// history file that it still holds it, and releases it. The parent SIGKILLs
// workers at random moments.
//
// Worker environment:
//
//	FAULTS_WORKER    client id (non-empty selects worker mode)
//	FAULTS_DSN       dblock DSN of the database
//	FAULTS_MODE      "raw" (dialect lease statements), "election", or a Locker mode
//	FAULTS_NAME      lock name
//	FAULTS_TTL       lease TTL
//	FAULTS_HISTORY   history file (appended)
//	FAULTS_LIFETIME  the worker exits by itself after this long
//	FAULTS_CUT       share (0..1) of acquires given a very short timeout
const envWorker = "FAULTS_WORKER"

// lockClient is what a worker drives: one acquisition at a time.
type lockClient interface {
	// acquire returns the token and a handle on success; out is Busy when the
	// name is definitely held by someone else, Unknown on any other error.
	acquire(ctx context.Context, name string, ttl, wait time.Duration) (h held, out history.Outcome, err error)
	close()
}

// held is one acquisition.
type held interface {
	token() int64
	// valid reports whether the holder may still trust the lock now.
	valid() bool
	// release returns OK, NotHeld or Unknown.
	release(ctx context.Context) (history.Outcome, error)
}

// rawClient drives the dialect's lease statements directly: no watchdog, the
// lease runs out TTL after the acquire started unless released.
type rawClient struct{ db *dialect.DB }

type rawHeld struct {
	db          *dialect.DB
	name, owner string
	tok         dblock.Token
	deadline    time.Time
}

func (c rawClient) acquire(ctx context.Context, name string, ttl, wait time.Duration) (held, history.Outcome, error) {
	owner := dblock.NewOwner()
	start := time.Now()
	for {
		t0 := time.Now()
		res, err := store.Of(c.db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
		if err != nil {
			return nil, history.Unknown, err
		}
		if res.Acquired {
			return &rawHeld{db: c.db, name: name, owner: owner, tok: res.Token, deadline: t0.Add(ttl)}, history.OK, nil
		}
		refusal := history.Busy
		if res.Holder.Owner == "" {
			// No holder named: another transaction held the row.
			refusal = history.Refused
		}
		if time.Since(start) >= wait {
			return nil, refusal, nil
		}
		select {
		case <-ctx.Done():
			// The last attempt was a definite refusal; nothing is pending.
			return nil, refusal, nil
		case <-time.After(time.Duration(10+rand.IntN(20)) * time.Millisecond):
		}
	}
}

func (rawClient) close() {}

func (h *rawHeld) token() int64 { return int64(h.tok) }
func (h *rawHeld) valid() bool  { return time.Now().Before(h.deadline) }
func (h *rawHeld) release(ctx context.Context) (history.Outcome, error) {
	ok, err := store.Of(h.db).ReleaseLease(ctx, nil, h.name, h.owner, h.tok)
	switch {
	case err != nil:
		return history.Unknown, err
	case ok:
		return history.OK, nil
	}
	return history.NotHeld, nil
}

// lockerClient drives a dblock.Locker (optimistic, fair, pessimistic adapter).
type lockerClient struct {
	l           dblock.Locker
	pessimistic bool
}

type lockerHeld struct{ lease *dblock.Lease }

func (c lockerClient) acquire(ctx context.Context, name string, ttl, wait time.Duration) (held, history.Outcome, error) {
	opts := []dblock.Option{dblock.WithWait(wait), dblock.WithTTL(ttl)}
	if c.pessimistic {
		// The TTL bounds an idle locking transaction; the token makes the
		// holder identifiable in the history.
		opts = append(opts, dblock.WithToken())
	}
	lease, err := c.l.Acquire(ctx, name, opts...)
	switch {
	case err == nil:
		return lockerHeld{lease}, history.OK, nil
	case errors.Is(err, dblock.ErrNotAcquired) && ctx.Err() == nil:
		// "Busy" (someone holds it) only when the error names a holder. A
		// wait that ran out while statements were failing (the database
		// restarting) also says "not acquired", but a failed statement may
		// have committed: that outcome is unknown.
		var held *dblock.HeldError
		if errors.As(err, &held) && (held.Owner != "" || held.Mode == dblock.ModePessimistic) {
			return nil, history.Busy, nil
		}
		return nil, history.Unknown, err
	}
	return nil, history.Unknown, err
}

func (c lockerClient) close() { _ = c.l.Close() }

func (h lockerHeld) token() int64 { return int64(h.lease.Token()) }
func (h lockerHeld) valid() bool {
	if h.lease.Err() != nil {
		return false
	}
	if d, ok := h.lease.Deadline(); ok && !time.Now().Before(d) {
		return false
	}
	return true
}
func (h lockerHeld) release(ctx context.Context) (history.Outcome, error) {
	err := h.lease.Release(ctx)
	switch {
	case err == nil:
		return history.OK, nil
	case errors.Is(err, dblock.ErrLost), errors.Is(err, dblock.ErrNotHeld):
		return history.NotHeld, err
	}
	return history.Unknown, err
}

// lockerFactories builds a Locker per mode; modes register themselves here
// (see modes_test.go) as their packages land.
var lockerFactories = map[string]func(db *dialect.DB) (dblock.Locker, error){}

func newClient(mode string, db *dialect.DB) (lockClient, error) {
	if mode == "raw" {
		return rawClient{db}, nil
	}
	if mode == modeElection {
		return newElectionClient(db), nil
	}
	f, ok := lockerFactories[mode]
	if !ok {
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	l, err := f(db)
	if err != nil {
		return nil, err
	}
	return lockerClient{l: l, pessimistic: mode == dblock.ModePessimistic}, nil
}

func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// runWorker is the body of a worker process. It returns the exit code.
func runWorker() int {
	id := os.Getenv(envWorker)
	lifetime := envDuration("FAULTS_LIFETIME", 60*time.Second)
	ttl := envDuration("FAULTS_TTL", time.Second)
	name := os.Getenv("FAULTS_NAME")
	cut, _ := strconv.ParseFloat(os.Getenv("FAULTS_CUT"), 64)
	ctx, cancel := context.WithTimeout(context.Background(), lifetime)
	defer cancel()
	parent := os.Getppid()

	rec, err := history.NewRecorder(id, os.Getenv("FAULTS_HISTORY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer rec.Close()
	openCtx, openCancel := context.WithTimeout(ctx, 15*time.Second)
	db, err := dialect.Open(openCtx, os.Getenv("FAULTS_DSN"))
	openCancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: open:", err)
		return 2
	}
	defer db.Close()
	switch os.Getenv("FAULTS_ROLE") {
	case "stophold":
		return stopHolder(ctx, db, os.Getenv("FAULTS_NAME"), ttl)
	case "stoppess":
		return stopPessimisticHolder(ctx, db, os.Getenv("FAULTS_NAME"), ttl)
	case "guardstop":
		return guardStopHolder(ctx, db, os.Getenv("FAULTS_NAME"), ttl)
	case "stopelect":
		return stopLeader(ctx, db, os.Getenv("FAULTS_NAME"), ttl)
	}
	mode := os.Getenv("FAULTS_MODE")
	c, err := newClient(mode, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer c.close()
	// Say we are ready, so the parent knows the worker got this far.
	fmt.Println("ready")

	workLoop(ctx, c, rec, mode, name, ttl, cut, func() bool { return os.Getppid() == parent })
	return 0
}

// workLoop acquires name, holds it briefly while recording hold
// confirmations, and releases it, until ctx ends or alive reports false. A
// share cut of the acquires get a very short timeout (unknown outcomes).
func workLoop(ctx context.Context, c lockClient, rec *history.Recorder, mode, name string, ttl time.Duration, cut float64, alive func() bool) {
	for ctx.Err() == nil && alive() {
		timeout := 5 * time.Second
		if rand.Float64() < cut {
			// Cut this acquire short: its outcome is unknown to us.
			timeout = time.Duration(rand.IntN(3000)) * time.Microsecond
		}
		actx, acancel := context.WithTimeout(ctx, timeout)
		// A pessimistic lock has no lease: it ends with its session, so a
		// dead holder's lock may be taken at once (TTL 0 for the model).
		recTTL := ttl
		if mode == dblock.ModePessimistic {
			recTTL = 0
		}
		callID := rec.Call(history.Acquire, name, recTTL, 0)
		h, out, err := c.acquire(actx, name, ttl, time.Second)
		acancel()
		tok := int64(0)
		if h != nil {
			tok = h.token()
		}
		rec.Return(callID, history.Acquire, name, tok, out, err)
		if h == nil {
			continue
		}
		// Hold for a little while, confirming the hold as we go.
		holdFor := time.Duration(5+rand.IntN(60)) * time.Millisecond
		end := time.Now().Add(holdFor)
		for {
			// The moment is taken before the check, so it is a moment at
			// which the holder trusted its lock.
			at := time.Now()
			if !at.Before(end) || !h.valid() {
				break
			}
			rec.HoldAt(name, tok, at)
			time.Sleep(5 * time.Millisecond)
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		relID := rec.Call(history.Release, name, 0, tok)
		rout, rerr := h.release(rctx)
		rcancel()
		rec.Return(relID, history.Release, name, tok, rout, rerr)
	}
}
