package dblock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestDoErrorIsOneLine: a Do whose fn fails after the lock was lost returns
// both, on one line, each prefix once: "job failed; dblock: "n" lost: lease
// expired", in every lease mode.
func TestDoErrorIsOneLine(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	m := newModes(t, iso)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for mode, l := range map[string]dblock.Locker{"optimistic": m.opt, "fair": m.fair} {
		err := l.Do(ctx, "one-line-"+mode, func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("job failed")
		}, dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond))
		if !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
			t.Fatalf("%s: %v, want the loss", mode, err)
		}
		want := `job failed; dblock: "one-line-` + mode + `" lost: lease expired`
		if got := err.Error(); got != want || strings.Count(got, "dblock:") != 1 {
			t.Errorf("%s: Do error %q, want %q", mode, got, want)
		}
	}
}
