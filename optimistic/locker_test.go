package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

func newOptimistic(t *testing.T, db *dialect.DB) *optimistic.Locker {
	t.Helper()
	l, err := optimistic.New(db, &optimistic.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	bad := map[string]*optimistic.Config{
		"negative poll min":  {PollMin: -time.Millisecond},
		"negative poll max":  {PollMax: -time.Millisecond},
		"max below min":      {PollMin: time.Second, PollMax: time.Millisecond},
		"negative release":   {ReleaseTimeout: -time.Second},
		"negative statement": {StatementTimeout: -time.Second},
	}
	for label, cfg := range bad {
		if _, err := optimistic.New(iso.DB, cfg); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", label, err)
		}
	}
	if _, err := optimistic.New(nil, nil); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("nil db: %v, want ErrInvalidOption", err)
	}
	l, err := optimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestRowLockedByTransaction: a name whose row a raw transaction holds with
// SELECT ... FOR UPDATE (on SQLite: a write transaction) is reported as held
// at once, never waited for.
func TestRowLockedByTransaction(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		l := newOptimistic(t, iso.DB)
		name := locktest.RandomName("forupdate")
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("create the row: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		other := iso.Open(t)
		tx, err := store.Of(other).BeginTxx(ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		switch iso.Kind {
		case store.SQLite:
			// No row locks: a write transaction holds the whole database,
			// as a pessimistic SQLite lock does.
			if _, err := tx.ExecContext(ctx, "UPDATE dblock_locks SET reentry = reentry WHERE name = ?1", name); err != nil {
				t.Fatalf("lock the database: %v", err)
			}
		default:
			q := "SELECT name FROM dblock_locks WHERE name = $1 FOR UPDATE"
			if iso.Kind == store.MySQL {
				q = "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE"
			}
			var got string
			if err := tx.QueryRowxContext(ctx, q, name).Scan(&got); err != nil {
				t.Fatalf("lock the row: %v", err)
			}
		}
		_, err = l.TryAcquire(ctx, name)
		var held *dblock.HeldError
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.As(err, &held) {
			t.Fatalf("TryAcquire of a row-locked name: %v, want a *HeldError", err)
		}
		if held.Mode != dblock.ModePessimistic {
			t.Errorf("holder mode %q, want %q", held.Mode, dblock.ModePessimistic)
		}
		if _, err := l.Acquire(ctx, name, dblock.WithWait(100*time.Millisecond)); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("Acquire with a wait of a row-locked name: %v, want ErrNotAcquired", err)
		}
		// A set containing it is refused whole, and its other name stays free.
		free := locktest.RandomName("forupdate-free")
		if _, err := l.TryAcquireMany(ctx, []string{free, name}); !errors.Is(err, dblock.ErrNotAcquired) || !errors.As(err, &held) {
			t.Fatalf("TryAcquireMany with a row-locked name: %v, want a *HeldError", err)
		}
		if h, err := iso.Store().LeaseHolder(ctx, nil, free); err != nil || h.Held() {
			t.Fatalf("%s after a refused set: %+v, %v; want free", free, h, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatalf("rollback: %v", err)
		}
		lease, err = l.Acquire(ctx, name, dblock.WithWait(time.Minute))
		if err != nil {
			t.Fatalf("acquire after the transaction ended: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}

// TestHooks: the hooks see each acquisition, release and loss.
func TestHooks(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	events := make(chan string, 10)
	l, err := optimistic.New(iso.DB, &optimistic.Config{Logger: testLogger(t), Hooks: &dblock.Hooks{
		OnAcquired: func(name, owner string, token dblock.Token, waited time.Duration) { events <- "acquired" },
		OnReleased: func(name, owner string, token dblock.Token, held time.Duration) { events <- "released" },
		OnLost: func(name, owner string, token dblock.Token, err error) {
			if errors.Is(err, dblock.ErrExpired) {
				events <- "lost"
			}
		},
	}})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	defer func() { _ = l.Close() }()
	ctx := context.Background()
	lease, err := l.Acquire(ctx, locktest.RandomName("hooks"))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	lease, err = l.Acquire(ctx, locktest.RandomName("hooks"), dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	<-lease.Done()
	for _, want := range []string{"acquired", "released", "acquired", "lost"} {
		if got := <-events; got != want {
			t.Fatalf("hook event %q, want %q", got, want)
		}
	}
}
