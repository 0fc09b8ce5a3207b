package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestHistory: `dblock history --enable` starts recording, an exec's
// acquisition shows as released (as text and as JSON), a name filter
// selects, and bad flags exit 64; on SQLite and on MariaDB (where the
// acquisitions then read their token from a returned row).
func TestHistory(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.SQLite, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			historyCLI(t, dbtest.New(t, kind))
		})
	}
}

func historyCLI(t *testing.T, iso *dbtest.Isolated) {
	c := cli{dsn: iso.DSN}
	if r := c.expect(t, exitOK, "history", "--enable"); r.stdout != "history enabled\n" {
		t.Fatalf("history --enable printed %q", r.stdout)
	}
	c.expect(t, exitOK, "exec", "--lock", "nightly", "--", "true")
	c.expect(t, exitOK, "exec", "--lock", "other", "--", "true")

	r := c.expect(t, exitOK, "history", "nightly")
	if strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `released`) || !strings.Contains(r.stdout, `"nightly"`) {
		t.Fatalf("history nightly printed %q, want one released entry", r.stdout)
	}
	r = c.expect(t, exitOK, "history", "--json", "--since", "1h")
	var lines []historyLine
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var h historyLine
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("history --json line %q: %v", l, err)
		}
		lines = append(lines, h)
	}
	if len(lines) != 2 || lines[0].Name != "other" || lines[1].Metadata == "" || lines[1].Token <= 0 ||
		lines[1].Ended != "released" || lines[1].EndedAt.Before(lines[1].AcquiredAt) {
		t.Fatalf("history --json: %+v, want other's entry, then nightly's", lines)
	}
	c.expect(t, exitOK, "exec", "--lock", "tx", "--mode", "pessimistic", "--", "true")
	if r := c.expect(t, exitOK, "history", "--json", "tx"); !strings.Contains(r.stdout, `"mode":"pessimistic"`) || !strings.Contains(r.stdout, `"ended":"released"`) {
		t.Fatalf("history of a pessimistic exec: %q", r.stdout)
	}
	if r := c.expect(t, exitOK, "history", "--disable"); r.stdout != "history disabled\n" {
		t.Fatalf("history --disable printed %q", r.stdout)
	}

	c.expect(t, exitUsage, "history", "--enable", "--disable")
	c.expect(t, exitUsage, "history", "--enable", "nightly")
	c.expect(t, exitUsage, "history", "a", "b")
	c.expect(t, exitUsage, "history", "--since", "-1s")
	c.expect(t, exitUsage, "history", "--limit", "0")
	c.expect(t, exitUsage, "history", strings.Repeat("x", 300))
}
