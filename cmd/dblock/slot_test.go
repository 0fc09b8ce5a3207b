package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
)

// exec --slot runs CMD once per slot; exec --min-hold keeps the lock after
// CMD for the minimum.
func TestExecSlotAndMinHold(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := cli{dsn: iso.DSN}
		c.expect(t, 0, "exec", "--lock", "hourly", "--slot", "@every 1h", "--wait", "0", "--", "true")
		r := c.expect(t, exitNotAcquired, "exec", "--lock", "hourly", "--slot", "@every 1h", "--wait", "0", "--", "true")
		assertOneLine(t, r.stderr, "ran already")
		c.expect(t, 0, "exec", "--lock", "minutely", "--slot", "* * * * *", "--", "true")

		start := time.Now()
		c.expect(t, 0, "exec", "--lock", "floor", "--min-hold", "2s", "--", "true")
		if time.Since(start) < 1500*time.Millisecond {
			r = c.expect(t, exitNotAcquired, "exec", "--lock", "floor", "--wait", "0", "--", "true")
			assertOneLine(t, r.stderr, `"floor" is held by owner`)
		}
		c.expect(t, 0, "exec", "--lock", "floor", "--wait", "10s", "--", "true")
		if d := time.Since(start); d < 1500*time.Millisecond {
			t.Fatalf("second run %v after the first, before its 2 s minimum", d)
		}
	})
}

func TestExecSlotUsage(t *testing.T) {
	t.Parallel()
	c := cli{dsn: "sqlite://" + filepath.Join(t.TempDir(), "u.db")}
	for _, args := range [][]string{
		{"--slot", "not a spec"},
		{"--min-hold", "5s", "--max-hold", "1s"},
		{"--mode", "pessimistic", "--min-hold", "1s"},
		{"--read", "--min-hold", "1s"},
		{"--min-hold", "1ns"},
	} {
		all := append(append([]string{"exec", "--lock", "x"}, args...), "--", "true")
		c.expect(t, exitUsage, all...)
	}
}
