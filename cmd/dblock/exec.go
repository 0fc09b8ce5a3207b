package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

const execHelp = `Usage: dblock [--dsn DSN] exec --lock NAME [--mode optimistic|pessimistic] [--fair]
                 [--read | --semaphore --limit N [--permits K]]
                 [--ttl DUR] [--max-hold DUR] [--min-hold DUR] [--slot SPEC]
                 [--wait DUR] [--owner ID] -- CMD [ARGS...]

Runs CMD while holding the lock NAME, like flock(1) but across hosts: every
process on every machine that uses the same database and NAME takes turns.
The lock is renewed while CMD runs and released when CMD ends; dblock then
exits with CMD's status.

CMD's environment also has:
  DBLOCK_NAME    the lock name
  DBLOCK_OWNER   the owner holding it
  DBLOCK_TOKEN   the fencing token: greater than every earlier holder's, so a
                 resource can reject writes from a holder that was superseded
                 (0 for --read --mode pessimistic, which takes none)

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dblock are
passed on to CMD (to its whole process group). One of them arriving while
dblock still waits for the lock ends the wait: dblock exits 128+N with one
line on stderr. If dblock is killed, CMD is killed with it (Linux) and the
lock expires after its TTL (pessimistic mode: at once, as the database ends
the dead client's transaction).

If the lock is lost while CMD runs (its lease could not be renewed in time,
or an administrator ran dblock release --force), dblock sends SIGTERM to CMD,
SIGKILL 10s later if it is still running, and exits 76.

Flags:
  --lock NAME     the lock to hold (required)
  --mode MODE     optimistic (default): a lease row, renewed while CMD runs;
                  pessimistic: a database transaction holds the row lock while
                  CMD runs (freed at once if dblock dies; needs a connection
                  for the whole run)
  --fair          take the lock in arrival order (FIFO) among waiters; with
                  --read or --semaphore, wait in arrival order among the
                  fair readers and writers, or the semaphore's fair requests
  --read          take the read lock of NAME (rwlock): shared with other
                  readers, excluded by every exclusive holder (any mode) and
                  by a writer waiting for it; with --mode pessimistic, a
                  transaction holding the row in share mode
  --semaphore     take permits of the semaphore NAME instead of a lock: at
                  most --limit N permits out at once (required; the
                  semaphore keeps the limit it was created with, and another
                  N is a usage error); --permits K (default 1) is how many
                  this run takes
  --ttl DUR       the lease length (default 30s); renewed every DUR/3 while
                  CMD runs. A dead dblock's lock is free again after DUR.
                  Pessimistic mode: the server ends the transaction if this
                  client goes silent for DUR (rounded up; on MySQL and
                  MariaDB to whole seconds, at least 2s); while CMD runs,
                  dblock keeps it busy every quarter of that.
  --max-hold DUR  never hold the lock longer than DUR: renewal stops there and
                  the lock is lost (CMD gets SIGTERM, exit 76). Lease modes
                  only (with --mode pessimistic it is a usage error).
  --min-hold DUR  keep the lock until DUR after it was taken, by the
                  database clock, even when CMD ends sooner: the same job
                  started by cron on hosts whose clocks differ by less than
                  DUR runs once. Lease modes only.
  --slot SPEC     run CMD at most once per slot of the cron SPEC (five
                  fields, or six with seconds; @hourly, @every 10m): the
                  slot is SPEC's latest time at or before this host's clock,
                  and the database records the last slot NAME ran for, so a
                  host whose clock is late (or a second run of the same
                  crontab line) finds it ran and exits 75 without running
                  CMD. Use the crontab line's own schedule.
  --wait DUR      give up after waiting DUR (exit 75); --wait 0 tries once;
                  without --wait, wait as long as it takes
                  (DUR: 30s, 5m, 1h30m; a bare number is seconds)
  --owner ID      the owner to hold the lock as (default: host:pid:random).
                  Reuse an owner to re-enter a lock it already holds.
  --metadata-args store CMD's arguments in the lock's metadata (shown by
                  dblock status); by default only the program's name is
                  stored, since arguments can hold secrets

Exit status: CMD's status (128+N if a signal N killed it); 75 if the lock
was not acquired (one line on stderr names the holder and its expiry, by the
database clock, or says that a pessimistic transaction holds it); 76 if the
lock was lost while CMD ran; 64 on bad usage; 127 if CMD was not found, 126
if it could not be run (not executable, a directory); 69 database
unreachable; 78 tables missing. Apart from CMD's own output, dblock prints
one line on stderr for each of these; set DBLOCK_LOG=debug (or info, warn,
error) to see the library's log as well.

Examples:
  dblock exec --lock hello -- echo "I hold the lock"
  dblock exec --lock nightly-report --wait 0 -- ./report.sh   # cron: skip if running
  dblock exec --lock deploy --wait 10m --ttl 1m -- make deploy
  dblock exec --lock queue --fair -- ./worker --once
  dblock exec --lock catalog --read -- ./export.sh           # many at once, no writer
  dblock exec --lock api-key --semaphore --limit 5 -- ./call.sh
  # crontab on every host: once per night, even with skewed clocks
  0 3 * * * dblock exec --lock nightly --slot "0 3 * * *" --wait 0 --max-hold 1h --min-hold 1m -- ./report.sh
`

const (
	// killGrace is how long CMD has to stop after SIGTERM on a lost lock.
	killGrace = 10 * time.Second
	// execReleaseTimeout bounds the release after CMD ends.
	execReleaseTimeout = 10 * time.Second
	// holderTimeout bounds the look-up of the holder for the exit-75 line.
	holderTimeout = 5 * time.Second
)

// optDuration is a duration flag that remembers whether it was given.
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		// A bare number of seconds is accepted too, for `--wait 0`.
		n, nerr := strconv.ParseFloat(s, 64)
		if nerr != nil {
			return fmt.Errorf("want a duration like 30s, 5m or 1h30m")
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		return fmt.Errorf("must not be negative")
	}
	o.d, o.set = d, true
	return nil
}

// exec runs the exec command and returns the exit code.
func (a *app) exec(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	f := &execFlags{}
	f.bind(fs)
	if done, err := a.parseFlags(fs, execHelp, args); done {
		if err != nil {
			return a.fail(err)
		}
		return exitOK
	}
	argv := fs.Args()
	if err := f.check(argv); err != nil {
		return a.fail(err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return a.fail(lookPathError(argv[0], err))
	}

	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return a.fail(err)
	}
	defer db.Close()
	locker, err := newLocker(db, f.spec, a.logger)
	if err != nil {
		return a.fail(err)
	}
	defer locker.Close()

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	a.logger.Debug("exec: acquiring", "lock", f.name, "mode", f.spec.mode, "wait", f.wait.String())
	lease, sig, err := acquire(ctx, locker, f.name, f.wait.set && f.wait.d == 0, f.options(argv), sigs)
	if sig != nil {
		if lease != nil {
			a.releaseAfter(ctx, lease)
		}
		a.errorLine(fmt.Errorf("exec: interrupted by %s while waiting for %q", signame(sig), f.name))
		return 128 + signum(sig)
	}
	if err != nil {
		return a.notAcquired(ctx, db, f, err)
	}
	a.logger.Debug("exec: acquired", "lock", f.name, "owner", lease.Owner(), "token", int64(lease.Token()))
	if !f.slot.IsZero() {
		if code, done := a.claimSlot(ctx, db, lease, f.slot); done {
			return code
		}
	}
	stopKeepAlive := locker.keepAlive(lease, f.ttl.d)
	return a.runHeld(ctx, lease, path, argv, sigs, stopKeepAlive)
}

// notAcquired reports an acquisition that failed and returns the exit code:
// 75 with the holder (or the permits out) when held, else the error's.
func (a *app) notAcquired(ctx context.Context, db *dialect.DB, f *execFlags, err error) int {
	switch {
	case errors.Is(err, dblock.ErrNotAcquired) && f.spec.mode == dblock.ModeSemaphore:
		a.errorLine(fmt.Errorf("exec: %w", err)) // It says how many permits are out.
		return exitNotAcquired
	case errors.Is(err, dblock.ErrNotAcquired):
		a.errorLine(notAcquiredLine(f.name, holderOf(ctx, db, f.name, err), err, f.wait))
		return exitNotAcquired
	}
	if serr := a.schemaError(err); serr != err {
		return a.fail(fmt.Errorf("exec: acquire %q: %w", f.name, serr))
	}
	return a.fail(fmt.Errorf("exec: %w", err)) // The library's error names the lock.
}

// acquire takes the lock, giving up when one of the forwarded signals
// arrives; it returns that signal. A lease acquired just as the signal
// arrived is returned with it, to be released.
func acquire(ctx context.Context, locker cliLocker, name string, try bool, opts []dblock.Option, sigs <-chan os.Signal) (*dblock.Lease, os.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lease *dblock.Lease
		err   error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		if try {
			r.lease, r.err = locker.TryAcquire(ctx, name, opts...)
		} else {
			r.lease, r.err = locker.Acquire(ctx, name, opts...)
		}
		res <- r
	}()
	select {
	case r := <-res:
		return r.lease, nil, r.err
	case sig := <-sigs:
		cancel()
		r := <-res
		return r.lease, sig, r.err
	}
}

// runHeld runs CMD while lease is held and returns dblock's exit code.
// stopKeepAlive is called once CMD has ended, before the release.
func (a *app) runHeld(ctx context.Context, lease *dblock.Lease, path string, argv []string, sigs <-chan os.Signal, stopKeepAlive func()) int {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, a.stdout, a.stderr
	cmd.Env = append(os.Environ(),
		"DBLOCK_NAME="+lease.Name(),
		"DBLOCK_OWNER="+lease.Owner(),
		"DBLOCK_TOKEN="+strconv.FormatInt(int64(lease.Token()), 10),
	)
	fg := prepareCmd(cmd)
	if err := cmd.Start(); err != nil {
		stopKeepAlive()
		a.releaseAfter(ctx, lease)
		return a.fail(withCode(exitCannotRun, fmt.Errorf("exec: start %s: %w", argv[0], err)))
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	var (
		lost    error
		done    = lease.Done()
		killNow <-chan time.Time
	)
wait:
	for {
		select {
		case sig := <-sigs:
			signalCmd(cmd, sig)
		case <-done:
			done = nil
			lost = lease.Err()
			a.errorLine(fmt.Errorf("exec: lock %q lost while %s ran (%v): sending SIGTERM", lease.Name(), argv[0], lostReason(lost)))
			signalCmd(cmd, syscall.SIGTERM)
			killNow = time.After(killGrace)
		case <-killNow:
			killNow = nil
			a.errorLine(fmt.Errorf("exec: %s still running %v after SIGTERM: sending SIGKILL", argv[0], killGrace))
			signalCmd(cmd, syscall.SIGKILL)
		case <-waitErr:
			break wait
		}
	}
	if fg {
		restoreForeground()
	}
	stopKeepAlive()

	relErr := a.release1(ctx, lease)
	switch {
	case lost != nil:
		return exitLost
	case errors.Is(relErr, dblock.ErrLost):
		a.errorLine(fmt.Errorf("exec: %s finished after the lock was lost: %w", argv[0], relErr))
		return exitLost
	case relErr != nil:
		a.errorLine(fmt.Errorf("exec: %w (the lease ends by itself when it expires)", relErr))
	}
	return exitStatus(cmd.ProcessState)
}

// release1 releases lease on a context that outlives ctx, bounded in time.
func (a *app) release1(ctx context.Context, lease *dblock.Lease) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), execReleaseTimeout)
	defer cancel()
	return lease.Release(ctx)
}

// releaseAfter releases a lease that CMD never ran under, reporting failures.
func (a *app) releaseAfter(ctx context.Context, lease *dblock.Lease) {
	if err := a.release1(ctx, lease); err != nil {
		a.errorLine(fmt.Errorf("exec: %w", err))
	}
}

// lostReason is why a lock was lost, without the lock's name that a
// *dblock.LostError repeats.
func lostReason(err error) error {
	var le *dblock.LostError
	if errors.As(err, &le) && le.Reason != nil {
		return le.Reason
	}
	return err
}

// holder is who holds a name, as the exit-75 line tells it.
type holder struct {
	held *dblock.HeldError // Nil when unknown.
	// now is the database clock, read with the holder when possible (zero
	// when it could not be read).
	now time.Time
	// writeLocked: SQLite's write lock is held by a transaction (a
	// pessimistic hold locks the whole file).
	writeLocked bool
}

// holderOf returns who holds name: a live lease holder read from the
// database now (with the database clock), else the holder err names, else a
// transaction found holding the name (pessimistic mode, which writes no
// owner: the lease row alone cannot tell), else what err says.
func holderOf(ctx context.Context, db *dialect.DB, name string, err error) holder {
	var held *dblock.HeldError
	errors.As(err, &held)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holderTimeout)
	defer cancel()
	var h holder
	lh, herr := store.Of(db).LeaseHolder(ctx, nil, name)
	if herr == nil && lh.Exists {
		h.now = lh.Now
	} else if now, err := store.Of(db).ClockNow(ctx); err == nil {
		h.now = now
	}
	switch {
	case herr == nil && lh.Held():
		h.held = lh.HeldError(name, nil)
		return h
	case held != nil && held.Owner != "":
		h.held = held
		return h
	}
	if tx, perr := store.Of(db).ProbeTxHolds(ctx, []string{name}, 0); perr == nil && tx.Held(name) {
		h.held = &dblock.HeldError{Name: name, Mode: dblock.ModePessimistic}
		h.writeLocked = tx.WriteLocked
		return h
	}
	h.held = held
	return h
}

// notAcquiredLine is the one stderr line of exit 75: who holds the lock and
// until when, by the database clock.
func notAcquiredLine(name string, h holder, err error, wait optDuration) error {
	held := h.held
	var b strings.Builder
	switch {
	case held == nil:
		fmt.Fprintf(&b, "%q not acquired", name)
	case held.Owner != "":
		fmt.Fprintf(&b, "%q is held by owner %q", name, held.Owner)
		if held.Mode != "" {
			fmt.Fprintf(&b, " (%s)", held.Mode)
		}
	case held.Mode == dblock.ModeRead:
		fmt.Fprintf(&b, "%q is held by readers", name)
		if held.Cause != nil && !errors.Is(held.Cause, context.DeadlineExceeded) && !errors.Is(held.Cause, context.Canceled) {
			fmt.Fprintf(&b, " (%v)", held.Cause)
		}
	case h.writeLocked:
		fmt.Fprintf(&b, "%q is held by a pessimistic transaction: the database is write-locked by a transaction (SQLite: a pessimistic hold locks the whole file until it ends)", name)
	case held.Mode == dblock.ModePessimistic:
		fmt.Fprintf(&b, "%q is held by a pessimistic transaction", name)
	default:
		fmt.Fprintf(&b, "%q is held by another owner", name)
	}
	if held != nil && !held.ExpiresAt.IsZero() {
		exp := held.ExpiresAt.UTC()
		fmt.Fprintf(&b, " until %s", exp.Format(time.RFC3339))
		switch {
		case h.now.IsZero():
		case exp.After(h.now):
			fmt.Fprintf(&b, " (in %s)", human(exp.Sub(h.now)))
		default:
			b.WriteString(" (expired)")
		}
	} else if held != nil && held.Mode == dblock.ModePessimistic && !h.writeLocked {
		b.WriteString(" (no lease: until its transaction ends)")
	}
	if wait.set && wait.d > 0 {
		fmt.Fprintf(&b, "; gave up after waiting %v", wait.d)
	}
	if held == nil {
		fmt.Fprintf(&b, ": %v", err)
	}
	return errors.New(b.String())
}

// metadata describes this exec for dblock status: host, pid and command.
func metadata(argv []string, withArgs bool) string {
	host, _ := os.Hostname()
	cmd := filepath.Base(argv[0])
	if withArgs {
		cmd = strings.Join(argv, " ")
	}
	s := strings.ToValidUTF8(fmt.Sprintf("dblock exec on %s pid %d: %s", host, os.Getpid(), cmd), "?")
	if len(s) <= dblock.MaxMetadataLen {
		return s
	}
	s = s[:dblock.MaxMetadataLen-3]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// exitStatus is CMD's exit status, or 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return exitFailure
}

// lookPathError is the error of a CMD that cannot be run: 127 when it
// does not exist, 126 when it exists but cannot be run (not executable, a
// directory), as shells report them.
func lookPathError(name string, err error) error {
	code := exitNotFound
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EISDIR) {
		code = exitCannotRun
	}
	// exec.Error and fs.PathError each add the name again; keep the cause.
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return withCode(code, fmt.Errorf("exec: %q: %w", name, err))
}

// signum returns a signal's number (1 for signals without one).
func signum(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 1
}
