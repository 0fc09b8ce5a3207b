package dblock_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// countingHandler counts the records it is handed.
type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h countingHandler) WithGroup(string) slog.Handler             { return h }

// TestSilentWithoutLogger: a Locker given no logger writes nothing to
// slog.Default, even when it has something to say (a lease lost at Warn).
// Not parallel: it swaps the process's default logger.
func TestSilentWithoutLogger(t *testing.T) {
	var records atomic.Int64
	prev := slog.Default()
	slog.SetDefault(slog.New(countingHandler{&records}))
	t.Cleanup(func() { slog.SetDefault(prev) })

	iso := dbtest.New(t, store.SQLite)
	l, err := optimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, "silent", dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-ctx.Done():
		t.Fatal("the lease did not expire")
	}
	if lease.Err() == nil {
		t.Fatal("the lease ended without a loss")
	}
	_ = lease.Release(ctx)
	if n := records.Load(); n != 0 {
		t.Fatalf("slog.Default received %d records from a Locker given no logger", n)
	}
}
