package fairqueue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// errDead reports that a waiter's row is gone or its heartbeat lapsed: it has
// lost its place and must enqueue again.
var errDead = errors.New("fairqueue: waiter row expired")

// waiter is a queued attempt's row.
type waiter struct {
	id int64
}

// queue enqueues the attempt and waits for its turn.
//
// The loop: check (one statement) whether the waiter is live, how many live
// waiters are ahead, the heartbeat deadline of the one directly ahead, and
// the lock row; when none is ahead and the lock is free or expired, take it
// (lock and own row in one transaction); otherwise sleep. On PostgreSQL and
// MariaDB the enqueue answers the first check, and a waiter woken by the
// events it needed takes without a check first (see state).
//
// Wake-ups: between two checks a waiter counts the queue's events, that is
// releases of the lock and waiters leaving: those of this Locker, and on
// PostgreSQL the notifications of the name, which Release, Leave and the
// reaper send from any process. A waiter k places from the head can
// be next only after k such events, one more if the lock was held when it
// checked (every waiter ahead takes and then releases, or leaves), so it
// re-checks early only then: one check per hand-off, and a release wakes
// one waiter, not a herd. The head re-checks on any release. The timers
// cover what nobody announces (other processes on MySQL and SQLite, an
// expiry): the head sleeps on a short capped backoff and at most until the
// holder's expiry, the others on a longer one and at most until the
// heartbeat deadline of the waiter directly ahead, when it moves up if that
// waiter died.
func (a *attempt) queue() (*dblock.Lease, error) {
	l := a.l
	q := &queueWait{a: a, lastAhead: -1, observe: positionFunc(a.ctx)}
	q.sig = l.local.subscribe(a.name)
	defer l.local.unsubscribe(a.name, q.sig)
	if l.hub != nil {
		var unsubscribe func()
		q.hubC, q.hubSent, unsubscribe = l.hub.SubscribeCounted(a.ctx, a.name, l.echoing(a.name))
		defer unsubscribe()
	}
	defer func() {
		if q.w != nil {
			a.leave(q.w)
			q.drop()
		}
	}()
	for try := 1; ; try++ {
		if serr := a.stopped(q.last.Holder); serr != nil {
			return nil, serr
		}
		// Counted from before the statement whose answer the loop reads
		// (the enqueue's, where it answers the check), so that no event
		// after its snapshot goes unseen.
		mark := q.mark()
		if q.w == nil {
			if err := q.join(try); err != nil {
				if errors.Is(err, errAgain) {
					continue
				}
				return nil, err
			}
		}
		s, guessed, err := q.state(try)
		if err != nil {
			if errors.Is(err, errAgain) {
				continue
			}
			return nil, err
		}
		if q.ownerHolds(s) {
			lease, err := q.reenter()
			if lease != nil || err != nil {
				return lease, err
			}
			continue
		}
		held := !free(s.Holder, a.o.Owner)
		if s.Ahead == 0 && !held {
			lease, err := q.takeHead(try)
			switch {
			case err == nil:
				return lease, nil
			case errors.Is(err, errAgain), guessed && errors.Is(err, dblock.ErrNotAcquired):
				continue // A guess that missed checks at once.
			case errors.Is(err, dblock.ErrNotAcquired):
				held = true
			case !errors.Is(err, errStay):
				return nil, err
			}
		}
		q.released = q.sleep(s, held, mark)
		if lease, done, err := q.collect(); done {
			return lease, err
		}
	}
}

// ownerHolds reports whether the waiter's owner holds the name while
// others wait ahead of it: an owner never waits behind waiters that wait
// for its own release (a re-entry goes first, as the direct attempt's).
func (q *queueWait) ownerHolds(s store.QueueState) bool {
	return s.Ahead > 0 && s.Holder.Held() && s.Holder.Owner == q.a.o.Owner
}

// reenter leaves the queue and re-enters the name its owner holds. Nil
// lease and error: the name was released meanwhile; the loop joins again.
func (q *queueWait) reenter() (*dblock.Lease, error) {
	q.a.leave(q.w)
	q.drop()
	return q.a.direct(true)
}

// errAgain asks the queue loop to go round again at once; errStay to sleep
// and check again without having taken the lock.
var (
	errAgain = errors.New("again")
	errStay  = errors.New("stay")
)

// queueWait is one waiter's state in the loop of queue: its row (nil
// between leaving and joining again), the signals it listens to, and what
// its last check saw.
type queueWait struct {
	a         *attempt
	sig       *signal
	hubC      <-chan struct{}
	hubSent   func() uint64 // The notices sent to hubC (nil without a hub).
	observe   func(Position)
	w         *waiter
	slot      *slot // w in its Locker's line, where releases hand over.
	backoff   int   // Backoff step, reset when the position changes.
	lastAhead int
	last      store.QueueState
	// released: the last sleep ended with as many events as the waiter
	// needed to be next, not with its timer.
	released bool
	// joined: the check the enqueue answered, until the loop reads it.
	joined *store.QueueState
}

// eventMark is where the counts of events stood before a check: this
// Locker's own (signals) and the notices of the hub.
type eventMark struct{ events, releases, notices uint64 }

func (q *queueWait) mark() eventMark {
	m := eventMark{events: q.sig.events.Load(), releases: q.sig.releases.Load()}
	if q.hubSent != nil {
		m.notices = q.hubSent()
	}
	return m
}

// retry decides after a failed statement: the end of the wait, or an error
// not worth retrying, is returned; otherwise it logs, sleeps a little and
// returns errAgain.
func (q *queueWait) retry(what string, try int, err error) error {
	a := q.a
	if serr := a.stopped(q.last.Holder); serr != nil {
		return serr
	}
	if !a.retryable(err) {
		return a.errorf("%w", err)
	}
	a.l.logger.LogAttrs(a.ctx, slog.LevelWarn, "fairqueue: "+what+" failed, retrying", a.attrs(
		slog.Int("attempt", try), slog.String("error", err.Error()))...)
	if serr := a.sleep(jitter(a.l.cfg.HeadPollMax)); serr != nil {
		return serr
	}
	return errAgain
}

// join enqueues the waiter.
func (q *queueWait) join(try int) error {
	w, joined, err := q.a.enqueue()
	if err != nil {
		return q.retry("enqueue", try, err)
	}
	q.w, q.lastAhead, q.joined = w, -1, joined
	q.joinLine()
	return nil
}

// check reads the waiter's place and the lock row. A waiter found dead
// joins again (errAgain); a move up resets the backoff and is reported to
// the position observer.
func (q *queueWait) check(try int) (store.QueueState, error) {
	a := q.a
	a.l.count()
	a.l.stats.checks.Add(1)
	s, err := a.l.db.CheckWaiter(a.ctx, nil, a.name, q.w.id)
	if err != nil {
		return s, q.retry("check", try, err)
	}
	return s, q.seen(s)
}

// seen records a check's answer (CheckWaiter's, or the enqueue's where it
// answers one, store.EnqueueChecked).
func (q *queueWait) seen(s store.QueueState) error {
	a := q.a
	q.last = s
	if !s.Live {
		a.requeue(q.w)
		q.drop()
		return errAgain
	}
	if s.Ahead != q.lastAhead {
		q.backoff = 0 // Moved up: the head polls fast again, the others from their base.
		if q.observe != nil {
			q.observe(Position{Name: a.name, Owner: a.o.Owner, Position: s.Ahead + 1, Joined: s.CreatedAt,
				Waited: max(s.Holder.Now.Sub(s.CreatedAt), 0)})
		}
	}
	q.lastAhead = s.Ahead
	return nil
}

// state is what the loop decides on: the answer of the enqueue that just
// joined, where it answers a check; a check; or a guess (guessed true).
// A waiter whose sleep ended with as many events as it needed to be next,
// where the take is one statement that itself checks that the waiter is
// live and first (store.TakeHead), guesses that it is first and the name
// free, and takes at once: one round trip fewer per hand-off. A take that
// the guess missed (a waiter still ahead, the name held) checks at once;
// the timer's wake-ups check first.
func (q *queueWait) state(try int) (s store.QueueState, guessed bool, err error) {
	released, joined := q.released, q.joined
	q.released, q.joined = false, nil
	if joined != nil {
		return *joined, false, q.seen(*joined)
	}
	if released && q.last.Live && q.a.l.db.TakesHeadInOne() {
		s = q.last
		s.Ahead = 0
		s.Holder = store.Holder{Now: s.Holder.Now}
		return s, true, nil
	}
	s, err = q.check(try)
	return s, false, err
}

// takeHead takes the lock at the head of the queue. ErrNotAcquired (another
// acquirer, in another mode, a TryAcquire or a pessimistic transaction, got
// there first) and errStay (a transient failure) keep the waiter at the
// head; a waiter found dead joins again (errAgain).
func (q *queueWait) takeHead(try int) (*dblock.Lease, error) {
	a := q.a
	lease, err := a.take(q.w)
	switch {
	case err == nil:
		q.drop() // The row went with the take.
		return lease, nil
	case errors.Is(err, errDead):
		a.requeue(q.w)
		q.drop()
		return nil, errAgain
	case errors.Is(err, dblock.ErrNotAcquired):
		return nil, err
	case a.retryable(err):
		a.l.logger.LogAttrs(a.ctx, slog.LevelDebug, "fairqueue: take failed, retrying", a.attrs(
			slog.Int("attempt", try), slog.String("error", err.Error()))...)
		return nil, errStay
	}
	return nil, a.errorf("%w", err)
}

// sleep waits until the waiter may be next, or its timer ends. Events
// before this waiter may be next: one per waiter ahead, and one more if the
// lock is held (its release); at least one. It reports whether the wait
// ended with those events.
func (q *queueWait) sleep(s store.QueueState, held bool, mark eventMark) (released bool) {
	a := q.a
	need := max(s.Ahead, 1)
	if held && s.Ahead > 0 {
		need++
	}
	d := a.delay(s, q.backoff)
	q.backoff++
	timer := time.NewTimer(d)
	defer timer.Stop()
	deadline := time.Now().Add(d)
	hubEvents, capped := 0, false
	handed := q.park()
	for {
		select {
		case <-timer.C:
			return false
		case <-handed:
			if a.l.line.woken(q.slot) {
				return false // collect reads what the release did.
			}
			continue
		case <-q.sig.ch:
		case <-q.hubC:
			if !capped && time.Until(deadline) > notifiedRecheck {
				// Notifications still merge where PostgreSQL delivers one
				// per transaction and payload (a reaper's batch), and one
				// wake-up covers those sent before the listener listened:
				// the count may stop short of need. Having heard anything,
				// the waiter looks again soon at the latest.
				capped = true
				timer.Reset(notifiedRecheck)
			}
		case <-a.ctx.Done():
			return false
		case <-a.l.life.Closing:
			return false
		}
		// This Locker's own events arrive first; on PostgreSQL the
		// notifications follow and cover them and everyone else's, so the
		// larger count never counts one event twice. The head waits for a
		// release only. Notices are counted from the mark, not by
		// wake-ups: the channel holds one, notices that arrive together
		// (one read of the listening connection, a waiter slow to run)
		// merge there, and echoes of this Locker's hand-offs wake nobody
		// (Locker.echoing).
		local := int(q.sig.events.Load() - mark.events)
		if q.hubSent != nil {
			hubEvents = int(q.hubSent() - mark.notices)
		}
		if s.Ahead == 0 {
			local = int(q.sig.releases.Load() - mark.releases)
		}
		if max(local, hubEvents) >= need {
			if q.echo() {
				continue // The count may have run ahead of the turn (echo).
			}
			return true
		}
	}
}

// notifiedRecheck bounds a waiter's sleep once a notification of its name
// arrived (see sleep): the events it waits for usually follow within a few
// hand-offs, well inside it, so it costs a check only when they do not.
const notifiedRecheck = 100 * time.Millisecond

// retryable reports whether a failed statement of a wait is worth retrying:
// a transient database error, or a statement that ran out of its own time
// (a busy database) while the caller still waits.
func (a *attempt) retryable(err error) bool {
	// ErrNotAcquired from a queue statement: on SQLite, another transaction
	// (a pessimistic holder) has the database's write lock; wait and retry.
	return leasekeeper.WaitRetryable(a.ctx, err) || errors.Is(err, dblock.ErrNotAcquired)
}

// delay is how long a waiter sleeps after a check that did not take the lock.
func (a *attempt) delay(s store.QueueState, step int) time.Duration {
	c := a.l.cfg
	if s.Ahead > 0 {
		// Behind the head: events bring it forward; the timer only covers
		// advances nobody announced (another process on MySQL or SQLite).
		// It starts from a base that grows with the distance to the head
		// and doubles while the queue does not move, and ends at the
		// heartbeat deadline of the waiter directly ahead: if that waiter
		// died (its process killed), this one moves up then.
		d := a.behindFirst(s.Ahead)
		for i := 0; i < step && d < c.PollMax; i++ {
			d *= 2
		}
		d = jitter(min(d, c.PollMax))
		return backoff.UntilExpiry(d, s.AheadExpiresAt, s.Holder.Now)
	}
	d := c.PollMin
	for i := 0; i < step && d < c.HeadPollMax; i++ {
		d *= 2
	}
	d = jitter(min(d, c.HeadPollMax))
	if h := s.Holder; h.Held() && h.Owner != a.o.Owner {
		// Wake when the lease ends by the database clock, whatever the backoff says.
		d = backoff.UntilExpiry(d, h.ExpiresAt, h.Now)
	}
	return d
}

// behindFirst is the first sleep of a waiter ahead places behind the head.
// Where releases are announced (PostgreSQL, unless Config.DisableNotify),
// notifications bring waiters forward, and the timer is a fallback:
// HeadPollMax per place and one more. Elsewhere a waiter whose queue moves
// through other processes learns of each move only from its own checks,
// and the next head's first check after a move is the hand-off: PollMin
// per place, the head's first step for the waiter next to it. (HeadPollMax
// per place held a queue spread over four processes on MariaDB to 14–23
// hand-offs a second; PollMin per place makes 176–197.) While the queue
// does not move the sleep doubles, so a long hold costs each waiter a few
// checks.
func (a *attempt) behindFirst(ahead int) time.Duration {
	if a.l.hub != nil {
		return a.l.cfg.HeadPollMax * time.Duration(ahead+1)
	}
	return a.l.cfg.PollMin * time.Duration(ahead)
}

// enqueue inserts the waiter's row; where the insert answers the waiter's
// first check too (PostgreSQL, MariaDB: store.EnqueueChecked), it returns that
// answer, one round trip fewer per acquisition. The insert runs on a
// context that outlives the caller's: an insert cancelled in flight may
// still commit, and a row nobody knows about would stand, live, at its
// place in the queue until its heartbeat deadline.
func (a *attempt) enqueue() (*waiter, *store.QueueState, error) {
	l := a.l
	ctx, cancel := l.db.StatementContext(context.WithoutCancel(a.ctx), l.cfg.ReleaseTimeout)
	defer cancel()
	unlock, err := a.lockWrites(true)
	if err != nil {
		return nil, nil, err
	}
	l.count()
	var t store.WaiterTicket
	var joined *store.QueueState
	if l.db.EnqueuesChecked() {
		var s store.QueueState
		t, s, err = l.db.EnqueueChecked(ctx, a.name, a.o.Owner, store.WaitExclusive, l.cfg.HeartbeatTimeout)
		joined = &s
		l.stats.checks.Add(1)
	} else {
		t, err = l.db.Enqueue(ctx, nil, a.name, a.o.Owner, store.WaitExclusive, l.cfg.HeartbeatTimeout)
	}
	unlock()
	if err != nil {
		return nil, nil, err
	}
	l.stats.enqueued.Add(1)
	l.beats.add(t.ID)
	if l.logger.Enabled(a.ctx, slog.LevelDebug) {
		l.logger.LogAttrs(a.ctx, slog.LevelDebug, "fairqueue: enqueued", a.attrs(slog.Int64("waiter", t.ID))...)
	}
	return &waiter{id: t.ID}, joined, nil
}

// requeue drops a dead waiter's row; the loop enqueues again at the back.
func (a *attempt) requeue(w *waiter) {
	a.l.stats.requeued.Add(1)
	a.l.logger.LogAttrs(a.ctx, slog.LevelWarn, "fairqueue: waiter missed its heartbeat deadline, queueing again",
		a.attrs(slog.Int64("waiter", w.id))...)
	a.leave(w)
}

// leave deletes the waiter's row on a context that outlives the caller's.
func (a *attempt) leave(w *waiter) {
	l := a.l
	l.beats.remove(w.id)
	ctx, cancel := l.db.StatementContext(context.WithoutCancel(a.ctx), l.cfg.ReleaseTimeout)
	defer cancel()
	l.count()
	unlock := l.lockWrites()
	_, err := l.db.LeaveQueue(ctx, nil, w.id)
	unlock()
	if err != nil {
		// The row dies at its heartbeat deadline and the reaper removes it.
		l.logger.LogAttrs(ctx, slog.LevelWarn, "fairqueue: leaving the queue failed", a.attrs(
			slog.Int64("waiter", w.id), slog.String("error", err.Error()))...)
	}
	l.local.notify(a.name, eventLeave)
}
