package reaper

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/telemetry"
)

// Defaults of Config.
const (
	ScheduleDefault     = "@every 15s"
	BatchSizeDefault    = 1000
	RetentionDefault    = 24 * time.Hour
	WaiterGraceDefault  = 10 * time.Second
	QueryTimeoutDefault = 30 * time.Second
	BatchPauseDefault   = 100 * time.Millisecond

	// RetentionMin is the shortest Retention accepted. A deleted row's name
	// starts again from the fencing floor, so deletions must come long after
	// the row's last acquisition.
	RetentionMin = time.Minute
	// BatchSizeMax is the largest BatchSize accepted.
	BatchSizeMax = 10000
)

// Config configures a Reaper. The zero value means "every default".
type Config struct {
	// Schedule is a cron spec: five standard fields ("*/5 * * * *"), a
	// descriptor ("@hourly") or an interval ("@every 15s"), evaluated in UTC.
	// Defaults to "@every 15s".
	Schedule string
	// BatchSize bounds the rows one statement frees or deletes (1 to 10000).
	// On SQLite, where a batch holds the database's only write lock, batches
	// start at a sixteenth of it and grow (or shrink back) to hold that lock
	// about 20 ms, a fifth of what a lease acquisition waits for it.
	// Defaults to 1000.
	BatchSize int
	// Retention is how long a free row stays before it is deleted (at least
	// one minute). Defaults to 24h.
	Retention time.Duration
	// HistoryRetention, when positive, is how long an entry of the
	// acquisition history (package history) is kept: each pass deletes
	// the entries that ended longer ago (where the database keeps a
	// history: not MySQL 8). Defaults to zero: kept for good.
	HistoryRetention time.Duration
	// WaiterGrace is how long past its heartbeat deadline a fair-queue waiter
	// is kept before it is deleted. Defaults to 10s.
	WaiterGrace time.Duration
	// BatchPause is the pause after each full batch, before the next, so a
	// large backlog is worked off without crowding out foreground locking; a
	// pass with less than a batch of work never pauses. Negative means no
	// pause. Defaults to 100ms.
	BatchPause time.Duration
	// QueryTimeout bounds each batch (and each statement on the reaper's own
	// lease). The reaper's lease lasts four times this and is renewed before
	// a batch once a third of it has passed; no batch runs past the lease's
	// local deadline. Defaults to 30s.
	QueryTimeout time.Duration
	// Owner names this replica. Each pass holds the reaper lease as Owner
	// followed by "#" and a random pass id, so two passes never share an
	// owner (and never re-enter each other's lease), even two passes of one
	// Reaper or of replicas given the same Owner. At most 238 bytes.
	// Defaults to dblock.NewOwner().
	Owner string
	// Logger receives per-pass counts (Info when the pass freed or deleted
	// rows, Debug when it found nothing to do), skipped passes and retries
	// (Debug, Warn) and failed scheduled passes (Error). Defaults to none: the library logs nothing unless given a logger.
	Logger *slog.Logger
	// Hooks observe passes, for metrics and tracing. Optional.
	Hooks *Hooks
	// Telemetry's MeterProvider receives the reaper's instruments (see
	// package telemetry), as Handler's /metrics serves them. Defaults to
	// the global OpenTelemetry provider.
	Telemetry *telemetry.Config
}

// passIDLen is the length of the suffix "#" + 16 hex digits that makes each
// pass's lease owner unique.
const passIDLen = 17

// cronParser accepts five standard fields and descriptors (including @every).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// resolve fills in c's defaults and checks every field, returning the parsed
// schedule and the reaper lease's TTL. Errors wrap dblock.ErrInvalidOption.
func (c *Config) resolve() (cron.Schedule, time.Duration, error) {
	if c.Schedule == "" {
		c.Schedule = ScheduleDefault
	}
	sched, err := cronParser.Parse(c.Schedule)
	if err != nil {
		return nil, 0, fmt.Errorf("reaper: %w: schedule %q: %w (want five cron fields, a descriptor such as @hourly, or @every 15s)",
			dblock.ErrInvalidOption, c.Schedule, err)
	}
	switch {
	case c.BatchSize == 0:
		c.BatchSize = BatchSizeDefault
	case c.BatchSize < 0 || c.BatchSize > BatchSizeMax:
		return nil, 0, fmt.Errorf("reaper: %w: batch size %d out of range [1, %d]", dblock.ErrInvalidOption, c.BatchSize, BatchSizeMax)
	}
	if c.HistoryRetention < 0 {
		return nil, 0, fmt.Errorf("reaper: %w: history retention %v is negative", dblock.ErrInvalidOption, c.HistoryRetention)
	}
	switch {
	case c.Retention == 0:
		c.Retention = RetentionDefault
	case c.Retention < RetentionMin:
		return nil, 0, fmt.Errorf("reaper: %w: retention %v shorter than %v", dblock.ErrInvalidOption, c.Retention, RetentionMin)
	}
	switch {
	case c.WaiterGrace == 0:
		c.WaiterGrace = WaiterGraceDefault
	case c.WaiterGrace < 0:
		return nil, 0, fmt.Errorf("reaper: %w: waiter grace %v is negative", dblock.ErrInvalidOption, c.WaiterGrace)
	}
	switch {
	case c.BatchPause == 0:
		c.BatchPause = BatchPauseDefault
	case c.BatchPause < 0:
		c.BatchPause = 0
	case c.BatchPause > time.Minute:
		return nil, 0, fmt.Errorf("reaper: %w: batch pause %v longer than a minute", dblock.ErrInvalidOption, c.BatchPause)
	}
	switch {
	case c.QueryTimeout == 0:
		c.QueryTimeout = QueryTimeoutDefault
	case c.QueryTimeout < 10*time.Millisecond:
		return nil, 0, fmt.Errorf("reaper: %w: query timeout %v shorter than 10ms", dblock.ErrInvalidOption, c.QueryTimeout)
	}
	leaseTTL := 4 * c.QueryTimeout
	if err := mode.ValidateTTL(leaseTTL); err != nil {
		return nil, 0, fmt.Errorf("reaper: query timeout %v: %w", c.QueryTimeout, err)
	}
	if c.Owner == "" {
		c.Owner = dblock.NewOwner()
	}
	if err := mode.ValidateOwner(c.Owner); err != nil {
		return nil, 0, fmt.Errorf("reaper: %w", err)
	}
	if len(c.Owner) > dblock.MaxOwnerLen-passIDLen {
		return nil, 0, fmt.Errorf("reaper: %w: owner of %d bytes, at most %d (a pass id is appended)",
			dblock.ErrInvalidOption, len(c.Owner), dblock.MaxOwnerLen-passIDLen)
	}
	return sched, leaseTTL, nil
}
