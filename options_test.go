package dblock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// badMetadata is metadata every acquisition must refuse, whatever the mode
// and the database: PostgreSQL and MariaDB reject it in a text column with a
// driver error, SQLite would store it as given.
var badMetadata = map[string]string{
	"NUL byte":      "host a\x00b",
	"invalid UTF-8": "host \xff\xfe",
	"truncated":     "caf\xc3",
	"too long":      strings.Repeat("m", dblock.MaxMetadataLen+1),
}

func TestResolveOptionsMetadata(t *testing.T) {
	t.Parallel()
	for what, md := range badMetadata {
		_, err := mode.Resolve(context.Background(), []dblock.Option{dblock.WithMetadata(md)})
		if !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("metadata with %s: err = %v, want ErrInvalidOption", what, err)
		}
		if err != nil && strings.Contains(err.Error(), "\x00") {
			t.Errorf("metadata with %s: the error carries a NUL byte: %q", what, err)
		}
	}
	for _, md := range []string{"", "host é pid 1 🔒", strings.Repeat("é", dblock.MaxMetadataLen/2)} {
		o, err := mode.Resolve(context.Background(), []dblock.Option{dblock.WithMetadata(md)})
		if err != nil || o.Metadata != md {
			t.Errorf("metadata %q: %q, %v", md, o.Metadata, err)
		}
	}
}

// TestMetadataRefusedEverywhere: in every mode on every database, bad
// metadata is refused with ErrInvalidOption before anything is written;
// good UTF-8 metadata (4-byte characters included) is stored as given.
func TestMetadataRefusedEverywhere(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m := newModes(t, iso)
		opt, fair, pess := m.opt, m.fair, m.pess
		tries := map[string]func(md string) error{
			"optimistic": func(md string) error {
				_, err := opt.TryAcquire(ctx, "job", dblock.WithMetadata(md))
				return err
			},
			"optimistic many": func(md string) error {
				_, err := opt.TryAcquireMany(ctx, []string{"job", "job2"}, dblock.WithMetadata(md))
				return err
			},
			"fair": func(md string) error {
				_, err := fair.Acquire(ctx, "job", dblock.WithMetadata(md), dblock.WithWait(time.Second))
				return err
			},
			"pessimistic": func(md string) error {
				_, err := pess.TryAcquire(ctx, "job", dblock.WithMetadata(md), dblock.WithToken())
				return err
			},
		}
		for mode, try := range tries {
			for what, md := range badMetadata {
				if err := try(md); !errors.Is(err, dblock.ErrInvalidOption) {
					t.Errorf("%s with %s metadata: err = %v, want ErrInvalidOption", mode, what, err)
				}
			}
		}
		var rows int
		if err := iso.Store().GetContext(ctx, &rows,
			"SELECT (SELECT COUNT(*) FROM dblock_locks) + (SELECT COUNT(*) FROM dblock_waiters)"); err != nil {
			t.Fatal(err)
		}
		if rows != 0 {
			t.Fatalf("refused acquisitions wrote %d rows", rows)
		}

		const good = "host é pid 1: 🔒 job"
		lease, err := opt.TryAcquire(ctx, "job", dblock.WithMetadata(good))
		if err != nil {
			t.Fatalf("acquire with UTF-8 metadata: %v", err)
		}
		defer lease.Release(context.WithoutCancel(ctx))
		q := "SELECT metadata FROM dblock_locks WHERE name = ?"
		if iso.Kind == store.Postgres {
			q = "SELECT metadata FROM dblock_locks WHERE name = $1"
		}
		var stored string
		if err := iso.Store().GetContext(ctx, &stored, q, "job"); err != nil {
			t.Fatal(err)
		}
		if stored != good {
			t.Fatalf("stored metadata %q, want %q", stored, good)
		}
	})
}

// TestPessimisticRefusesLeaseOptions: an option pessimistic mode cannot
// honour (a cap on a lease it does not have, metadata it does not store) is
// refused with ErrInvalidOption, through the handle and the Locker adapter,
// and nothing is held afterwards; the lease modes accept both.
func TestPessimisticRefusesLeaseOptions(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := newModes(t, iso)
	pess, opt := m.pess, m.opt
	refused := map[string]dblock.Option{
		"WithMaxHold":  dblock.WithMaxHold(time.Minute),
		"WithMetadata": dblock.WithMetadata("host a"),
	}
	for label, o := range refused {
		if _, err := pess.TryAcquire(ctx, "job", o); !errors.Is(err, dblock.ErrInvalidOption) || !strings.Contains(err.Error(), label) {
			t.Errorf("pessimistic with %s: %v, want ErrInvalidOption naming the option", label, err)
		}
		if err := pess.AsLocker().Do(ctx, "job", func(context.Context) error { return nil }, o); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("pessimistic Do with %s: %v, want ErrInvalidOption", label, err)
		}
		lease, err := opt.TryAcquire(ctx, "job", o)
		if err != nil {
			t.Fatalf("optimistic with %s: %v", label, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := pess.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("the name is not free after the refusals: %v", err)
	}
	_ = lease.Release(ctx)
}
