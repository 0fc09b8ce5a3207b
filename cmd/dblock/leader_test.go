package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestLeader: `dblock leader NAME` exits 75 with no leader, prints the
// leader's value and term once one is elected (as text and as JSON), and
// --watch prints the current leader, then a new value proclaimed, and
// exits 0 when interrupted.
func TestLeader(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	c := cli{dsn: iso.DSN}
	r := c.expect(t, exitNotAcquired, "leader", "office")
	assertOneLine(t, r.stderr, `"office" has no leader`)

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	e, err := election.New(iso.DB, "office", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	term, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	r = c.expect(t, exitOK, "leader", "office")
	if want := fmt.Sprintf(`"office": leader "host-a", term %d, since `, term.Token()); !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("leader printed %q, want it to start with %q", r.stdout, want)
	}
	r = c.expect(t, exitOK, "leader", "--json", "office")
	var line leaderLine
	if err := json.Unmarshal([]byte(r.stdout), &line); err != nil || line.Value != "host-a" || line.Term != int64(term.Token()) || !line.ExpiresAt.After(line.Since) {
		t.Fatalf("leader --json printed %q (%+v, %v)", r.stdout, line, err)
	}

	p := c.start(t, "leader", "--watch", "--interval", "20ms", "office")
	eventually(t, "the watch's first line", func() bool { return strings.Contains(fileText(p.out), `"host-a"`) })
	if err := e.Proclaim(ctx, "host-a:8080"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the proclaimed value", func() bool { return strings.Contains(fileText(p.out), `"host-a:8080"`) })
	time.Sleep(50 * time.Millisecond)
	p.signal(syscall.SIGINT)
	if r := p.wait(); r.code != exitOK || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("leader --watch: exit %d, stdout %q, stderr %q; want 0 and two lines", r.code, r.stdout, r.stderr)
	}

	c.expect(t, exitUsage, "leader")
	c.expect(t, exitUsage, "leader", "a", "b")
	c.expect(t, exitUsage, "leader", "--interval", "0s", "office")
	c.expect(t, exitUsage, "leader", strings.Repeat("x", 300))
}

// fileText returns the file's text so far ("" when unreadable).
func fileText(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
