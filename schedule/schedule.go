package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/telemetry"
)

// TTLDefault is the lease of a running job when Config.TTL is zero: renewed
// every third of it while the job runs (up to AtMostFor).
const TTLDefault = 30 * time.Second

// Config configures a Scheduler. The zero value (or a nil *Config) means
// defaults.
type Config struct {
	// Logger receives runs, skips and failures. Defaults to none.
	Logger *slog.Logger
	// Hooks observe the jobs' locks (acquired, released, lost).
	Hooks *dblock.Hooks
	// Telemetry chooses where the locks' metrics and spans go (mode
	// "schedule").
	Telemetry *telemetry.Config
	// Owner names this replica in the locks (a run's owner is Owner, '#'
	// and the slot). Defaults to host:pid:random.
	Owner string
	// TTL is the lease of a running job, renewed while it runs: a replica
	// that dies mid-job frees the job's lock after TTL by the database
	// clock. Defaults to TTLDefault.
	TTL time.Duration
	// Location is the time zone of the cron specs. Defaults to time.Local.
	Location *time.Location
	// Now is this replica's clock, which decides when a slot fires (its
	// nominal time is the slot); tests give one that runs ahead or behind.
	// Defaults to time.Now. Whether a slot already ran, and how long a lock
	// lasts, are decided by the database, never by this clock.
	Now func() time.Time
}

// Scheduler runs jobs on cron schedules, each slot once across the
// replicas that run the same jobs on the same database. It is safe for
// concurrent use.
type Scheduler struct {
	db     *store.DB
	cfg    Config
	parts  leasemode.Parts
	parser cron.Parser

	mu      sync.Mutex
	jobs    []*job
	started bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// New returns a Scheduler on db (which stays the caller's). Configuration
// errors wrap dblock.ErrInvalidOption.
func New(handle *dialect.DB, cfg *Config) (*Scheduler, error) {
	db, err := leasemode.Store(handle, "schedule")
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TTL == 0 {
		c.TTL = TTLDefault
	}
	if err := mode.ValidateTTL(c.TTL); err != nil {
		return nil, fmt.Errorf("schedule: new: TTL: %w", err)
	}
	if c.Owner == "" {
		c.Owner = dblock.NewOwner()
	} else if err := mode.ValidateOwner(c.Owner); err != nil {
		return nil, fmt.Errorf("schedule: new: %w", err)
	}
	if c.Location == nil {
		c.Location = time.Local
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	p, err := leasemode.New(db, leasemode.Wiring{
		Prefix: "schedule", Mode: dblock.ModeSchedule, Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: true, // Nobody waits: a replica that finds a job running skips the slot.
		Keeper:        leasekeeper.Config{},
	})
	if err != nil {
		return nil, err
	}
	return &Scheduler{db: db, cfg: c, parts: p, stop: make(chan struct{}), parser: parser}, nil
}

// parser reads cron specs: five fields, six with seconds, or a descriptor.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Option is a job's option.
type Option func(*jobOptions)

type jobOptions struct {
	atMost, atLeast time.Duration
	catchUp         bool
}

// AtMostFor bounds a run: its lock is renewed while the job runs but never
// past d from the start, where the job's context is cancelled and the lock
// runs out by the database clock, freed even if the job hangs.
func AtMostFor(d time.Duration) Option { return func(o *jobOptions) { o.atMost = d } }

// AtLeastFor keeps a run's lock until d after the run started, by the
// database clock, even when the job ends sooner: a replica whose clock is
// behind, firing the same schedule later, finds it held and skips.
func AtLeastFor(d time.Duration) Option { return func(o *jobOptions) { o.atLeast = d } }

// CatchUp runs, once, a slot missed while every replica was down: when the
// Scheduler starts, a job whose last slot (recorded in the database) is
// older than its latest slot due runs for that one.
func CatchUp() Option { return func(o *jobOptions) { o.catchUp = true } }

// Add schedules fn as the job name on spec: a cron expression with an
// optional seconds field ("0 3 * * *", "*/10 * * * * *") or a descriptor
// ("@hourly", "@every 5m"; @every slots are aligned on multiples of the
// interval since the Unix epoch, so replicas agree on them). The job's lock
// is the lock name in the namespace of every mode. Bad input (a bad spec or
// name, bounds below dblock.TTLMin, AtLeastFor above AtMostFor, a name added
// twice) is an error wrapping dblock.ErrInvalidOption or
// dblock.ErrInvalidName, and adds nothing.
func (s *Scheduler) Add(spec, name string, fn func(ctx context.Context) error, opts ...Option) error {
	j, err := s.newJob(spec, name, fn, opts)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.jobs {
		if other.name == name {
			return fmt.Errorf("schedule: add %q: %w: the job is already scheduled", name, dblock.ErrInvalidOption)
		}
	}
	s.jobs = append(s.jobs, j)
	if s.started {
		s.launch(j)
	}
	return nil
}

// Start starts firing the jobs added so far and later (after catching up
// the jobs that asked for it). Calling it again does nothing.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	for _, j := range s.jobs {
		s.launch(j)
	}
}

// Stop stops firing, then waits for the runs in progress until ctx ends
// (their contexts are not cancelled: a run ends by itself or at its
// AtMostFor bound), and frees the locks still held. It returns ctx's error
// when it gave up waiting.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("schedule: stop: runs still in progress: %w", ctx.Err())
	}
	if s.parts.Life.BeginClose() {
		err = errors.Join(err, s.parts.Close("schedule"))
	}
	return err
}

// launch starts j's firing loop; s.mu is held.
func (s *Scheduler) launch(j *job) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		j.loop(s)
	}()
}
