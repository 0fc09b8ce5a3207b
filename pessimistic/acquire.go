package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
)

// Acquire takes name, waiting in the database's lock queue (bounded by ctx,
// WithWait and Config.LockTimeout) for a pessimistic holder, and polling
// with backoff until expiry for a lease holder. A second Acquire by the same
// owner for a name this Locker holds re-enters the held transaction.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindAcquire, []string{name}, opts)
}

// TryAcquire takes name or returns at once an error wrapping
// dblock.ErrNotAcquired (with a *dblock.HeldError). On SQLite it returns as
// soon as the database's write lock is seen busy.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindTry, []string{name}, opts)
}

// AcquireMany takes several names at once: their rows are locked by one
// statement in name order, so two callers asking for overlapping sets never
// deadlock on each other. The lease's Name is the sorted names joined with
// commas; Token is the highest of the names' tokens (see TokenOf). None of
// the names may already be held by this owner through this Locker.
func (l *Locker) AcquireMany(ctx context.Context, names []string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindAcquire, names, opts)
}

// TryAcquireMany is AcquireMany without waiting.
func (l *Locker) TryAcquireMany(ctx context.Context, names []string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindTry, names, opts)
}

// Do acquires name (waiting like Acquire), runs fn inside the locking
// transaction under a context cancelled if the lock is lost, and commits
// when fn returns nil or rolls back when it returns an error or panics (the
// panic is re-raised after the rollback). A lock lost while fn ran is
// reported (errors.Is(err, dblock.ErrLost)) together with fn's error.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, tx *sql.Tx) error, opts ...dblock.Option) (err error) {
	return l.do(ctx, l.Acquire, name, fn, opts)
}

func (l *Locker) do(ctx context.Context, acquire func(context.Context, string, ...dblock.Option) (*Lease, error),
	name string, fn func(ctx context.Context, tx *sql.Tx) error, opts []dblock.Option) (err error) {
	ctx, span := l.rec.BeginSpan(ctx, obs.SpanDo, name)
	var token dblock.Token
	defer func() { obs.EndSpan(span, token, err) }()
	lease, err := acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	token = lease.Token()
	return run(ctx, lease, fn)
}

func run(ctx context.Context, lease *Lease, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	fnCtx, cancel := lease.Context(ctx)
	defer cancel()
	panicked := true
	defer func() {
		if panicked {
			relCtx, relCancel := lease.endContext(ctx)
			defer relCancel()
			_ = lease.Rollback(relCtx)
		}
	}()
	fnErr := fn(fnCtx, lease.Tx())
	panicked = false
	cancel()
	relCtx, relCancel := lease.endContext(ctx)
	defer relCancel()
	var relErr error
	if fnErr != nil {
		relErr = lease.Rollback(relCtx)
	} else {
		relErr = lease.Commit(relCtx)
	}
	if relErr == nil {
		return fnErr
	}
	return errjoin.Join(fnErr, relErr)
}

// endContext bounds the commit or rollback that ends Do's transaction by
// the Locker's endBound from now, whatever ctx says: the caller's cancellation
// must not leave the transaction open. Ends begun close together share one
// deadline (store.StatementContext), so that a Do does not start a timer
// of its own.
func (l *Lease) endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return l.h.l.db.StatementContext(context.WithoutCancel(ctx), l.h.l.endBound)
}

// kind is what an acquisition asks for.
type kind struct {
	op          string // The call, in errors: "try acquire".
	try, shared bool
}

var (
	kindAcquire   = kind{op: "acquire"}
	kindTry       = kind{op: "try acquire", try: true}
	kindShared    = kind{op: "acquire shared", shared: true}
	kindTryShared = kind{op: "try acquire shared", try: true, shared: true}
)

func (l *Locker) acquire(ctx context.Context, k kind, names []string, opts []dblock.Option) (lease *Lease, err error) {
	ctx, call := l.rec.BeginAcquire(ctx, labelOf(names), !k.try)
	defer func() { call.EndToken(leaseToken(lease), err) }()
	req, err := l.prepare(ctx, k, names, opts)
	if err != nil {
		return nil, err
	}
	r := &req
	// Close ends waits: closeCtx is cancelled with dblock.ErrClosed as its
	// cause (admit registers it with the Locker, leave forgets it).
	// Statements that do not wait keep the caller's ctx: a context that can
	// be cancelled costs the drivers a watcher hand-off per statement.
	closeCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.closeWait = cancel
	if lease, done, err := l.admit(ctx, r); done {
		return lease, err
	}
	defer l.leave(r)

	waitCtx, cancelWait := l.waitBound(closeCtx, r)
	defer cancelWait()

	keys, err := l.enterAll(closeCtx, waitCtx, r)
	if err != nil {
		return nil, err
	}
	h, err := l.lock(ctx, closeCtx, waitCtx, r)
	if err != nil {
		l.leaveGates(keys)
		return nil, err
	}
	h.gates = keys
	return l.register(h, r.o, r.label, r.start)
}

// request is one acquisition's input, checked and resolved.
type request struct {
	op, label string
	shared    bool     // AcquireShared, TryAcquireShared
	names     []string // Sorted, without duplicates.
	o         mode.Options
	ttl       time.Duration
	try       bool
	start     time.Time
	// closeWait cancels the acquisition's waits when the Locker closes.
	closeWait context.CancelCauseFunc
}

// prepare validates the names and options of an acquisition.
func (l *Locker) prepare(ctx context.Context, k kind, names []string, opts []dblock.Option) (request, error) {
	op, try := k.op, k.try
	c, err := mode.Begin(ctx, "pessimistic: "+op, names, !try, opts)
	if err != nil {
		return request{}, err
	}
	o := c.Opts
	r := request{op: op, label: labelOf(c.Names), names: c.Names, o: o, ttl: l.ttl, try: try,
		shared: k.shared}
	if r.shared && o.Token {
		return request{}, fmt.Errorf("pessimistic: %s %q: %w: WithToken: a shared hold takes no token of its own", op, r.label, dblock.ErrInvalidOption)
	}
	if err := l.checkExclusive(ctx); err != nil {
		return request{}, fmt.Errorf("pessimistic: %s %q: %w", op, r.label, err)
	}
	if err := refuseLeaseOnly(o); err != nil {
		return request{}, fmt.Errorf("pessimistic: %s %q: %w", op, r.label, err)
	}
	if o.TTLSet {
		r.ttl = o.TTL
	}
	if o.Token && l.caps.RowLocks && !l.sideWanted() {
		return request{}, fmt.Errorf("pessimistic: %s %q: %w", op, r.label, errNoSide)
	}
	r.start = time.Now()
	return r, nil
}

// admit counts the acquisition in (leave counts it out), or answers it at
// once (done): refused on a closed Locker or for a name this owner holds in
// another transaction, or re-entered.
func (l *Locker) admit(ctx context.Context, r *request) (lease *Lease, done bool, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, true, fmt.Errorf("pessimistic: %s %q: %w: %w", r.op, r.label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if h := l.reentrant(r.names, r.o.Owner); h != nil {
		l.mu.Unlock()
		if h.shared && !r.shared {
			return nil, true, fmt.Errorf("pessimistic: %s %q: %w: %w", r.op, r.label, dblock.ErrNotAcquired, ErrUpgrade)
		}
		lease, err := l.reenter(ctx, r.op, r.label, h, r.o, r.start)
		return lease, true, err
	}
	for _, n := range r.names {
		if h, ok := l.holds[holdKey{n, r.o.Owner}]; ok && !h.ended && h.lost == nil {
			l.mu.Unlock()
			return nil, true, fmt.Errorf("pessimistic: %s %q: %w: %q is already held by this owner in another transaction",
				r.op, r.label, dblock.ErrInvalidOption, n)
		}
	}
	l.inflight.Add(1)
	l.admitted[r] = struct{}{}
	l.mu.Unlock()
	return nil, false, nil
}

// leave counts an admitted acquisition out.
func (l *Locker) leave(r *request) {
	l.mu.Lock()
	delete(l.admitted, r)
	l.mu.Unlock()
	l.inflight.Done()
}

// waitBound returns the context of the acquisition's wait: the option's
// bound, else Config.LockTimeout, else none; a zero bound makes it a try.
func (l *Locker) waitBound(closeCtx context.Context, r *request) (context.Context, context.CancelFunc) {
	wait, hasWait := r.o.Wait, r.o.HasWait
	if !hasWait && l.lockWait > 0 {
		wait, hasWait = l.lockWait, true
	}
	if hasWait && wait == 0 {
		r.try = true
	}
	if hasWait && !r.try {
		return context.WithTimeout(closeCtx, wait)
	}
	return closeCtx, func() {}
}

// enterAll enters the gates of the names, then reserves the Locker's own
// connection. Goroutines of this process queue at the gates, not in the
// database: one connection per name (per database on SQLite) waits there at
// a time, and a name held by this process is handed over without a round
// trip. The Locker's own connection comes before the holder's, so that it
// is never stuck behind holders that exhausted the pool.
func (l *Locker) enterAll(closeCtx, waitCtx context.Context, r *request) ([]string, error) {
	keys := r.names
	switch {
	case !l.caps.RowLocks:
		keys = []string{""}
	case r.shared:
		keys = nil // Shared holds of one process share too: the database orders them with the others.
	}
	for i, k := range keys {
		if err := l.enterGate(waitCtx, k, r.try); err != nil {
			l.leaveGates(keys[:i])
			if closeCtx.Err() != nil {
				err = context.Cause(closeCtx)
			}
			return nil, notAcquiredErr(r.op, r.label, nil, err)
		}
	}
	if err := l.reserveSide(waitCtx, r.try); err != nil {
		l.leaveGates(keys)
		if errors.Is(err, ErrPoolExhausted) || waitCtx.Err() != nil {
			if closeCtx.Err() != nil {
				err = errjoin.Join(err, context.Cause(closeCtx))
			}
			return nil, notAcquiredErr(r.op, r.label, nil, err)
		}
		return nil, fmt.Errorf("pessimistic: %s %q: %w", r.op, r.label, err)
	}
	return keys, nil
}

func notAcquiredErr(op, label string, holder *store.Holder, cause error) error {
	he := &dblock.HeldError{Name: label, Mode: dblock.ModePessimistic, Cause: cause}
	if holder != nil {
		he = holder.HeldError(label, cause)
	}
	return fmt.Errorf("pessimistic: %s %q: %w", op, label, he)
}

// refuseLeaseOnly refuses the options only lease modes can honour: a
// transaction's hold has no lease to cap (dblock.WithMaxHold) and writes
// nothing to its row (dblock.WithMetadata).
func refuseLeaseOnly(o mode.Options) error {
	if o.MaxHold != 0 {
		return fmt.Errorf("%w: WithMaxHold: a pessimistic hold lasts as long as its transaction (bound its work with ctx)", dblock.ErrInvalidOption)
	}
	if o.Metadata != "" {
		return fmt.Errorf("%w: WithMetadata: a pessimistic hold stores no metadata", dblock.ErrInvalidOption)
	}
	if o.MinHold != 0 {
		return fmt.Errorf("%w: WithMinHold: a pessimistic hold ends with its transaction", dblock.ErrInvalidOption)
	}
	return nil
}

// checkExclusive makes sure, once, that a row lock on the database excludes
// every client (see Config.AllowMultiPrimary).
func (l *Locker) checkExclusive(ctx context.Context) error {
	if l.allowMultiPrimary || l.exclusive.Load() {
		return nil
	}
	ok, err := l.db.RowLocksExclusive(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("check for a multi-primary cluster: %w", err)
	case !ok:
		return fmt.Errorf("%w: use the optimistic or fairqueue mode, or set pessimistic.Config.AllowMultiPrimary if every client writes through one node",
			ErrMultiPrimary)
	}
	l.exclusive.Store(true)
	return nil
}

func labelOf(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

// reentrant returns the live hold of owner that covers exactly names, if any.
func (l *Locker) reentrant(names []string, owner string) *hold {
	h, ok := l.holds[holdKey{names[0], owner}]
	if !ok || h.ended || h.lost != nil {
		return nil
	}
	if len(names) == 1 {
		return h
	}
	if slices.Equal(h.names, names) {
		return h
	}
	return nil
}

func (l *Locker) reenter(ctx context.Context, op, label string, h *hold, o mode.Options, start time.Time) (*Lease, error) {
	fail := func(err error) (*Lease, error) {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	h.spMu.Lock()
	defer h.spMu.Unlock()
	l.mu.Lock()
	if h.ended || h.lost != nil {
		l.mu.Unlock()
		return fail(fmt.Errorf("%w: the held transaction ended while re-entering", dblock.ErrNotAcquired))
	}
	needToken := o.Token && h.tokens == nil
	names := slices.Clone(h.names)
	l.mu.Unlock()
	// The token is written before the savepoint, so that a rollback to the
	// savepoint keeps it.
	var tokens map[string]dblock.Token
	if needToken {
		var err error
		if tokens, err = l.bumpTokens(ctx, h, names); err != nil {
			return fail(fmt.Errorf("token: %w", err))
		}
	}
	h.spSeq++
	sp := fmt.Sprintf("dblock_%d", h.spSeq)
	if err := l.db.Savepoint(ctx, h.tx, sp); err != nil {
		l.txTrouble(h, err)
		return fail(fmt.Errorf("savepoint: %w", err))
	}
	l.mu.Lock()
	if h.ended || h.lost != nil {
		l.mu.Unlock()
		return fail(fmt.Errorf("%w: the held transaction ended while re-entering", dblock.ErrNotAcquired))
	}
	if tokens != nil && h.tokens == nil {
		h.tokens = tokens
	}
	h.count++
	lease := l.newHandle(h, label)
	lease.sp = sp
	l.mu.Unlock()
	h.stack = append(h.stack, lease)
	l.acquired(lease, start)
	return lease, nil
}

// leaseToken is lease's token, zero for no lease.
func leaseToken(lease *Lease) dblock.Token {
	if lease == nil {
		return 0
	}
	return lease.Token()
}
