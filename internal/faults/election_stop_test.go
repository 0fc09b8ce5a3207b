package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/dbtest"
)

// stopLeader is the worker body of TestFaultSIGSTOPLeader: it is elected
// for name with a renewed term of ttl, prints "held TERM", waits for the
// term's loss ("lost ERR"), then proclaims ("proclaim ERR") and exits.
func stopLeader(ctx context.Context, db *dialect.DB, name string, ttl time.Duration) int {
	e, err := election.New(db, name, &election.Config{TTL: ttl, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer e.Close()
	fmt.Println("ready")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	term, err := e.Campaign(cctx, "frozen")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("held %d\n", term.Token())
	select {
	case <-term.Done():
		fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(term.Err()), "\n", " "))
	case <-ctx.Done():
		return 2
	}
	fmt.Printf("proclaim %v\n", strings.ReplaceAll(fmt.Sprint(e.Proclaim(ctx, "still me?")), "\n", " "))
	return 0
}

// TestFaultSIGSTOPLeader freezes (SIGSTOP) an elected leader of a renewed
// 1 s term. A rival candidate must be elected, in a later term, within
// TTL + 2 s; the resumed leader (SIGCONT) must report its term lost and its
// Proclaim must fail with ErrNotLeader: at most one leader per term, and a
// frozen one never acts as leader again.
func TestFaultSIGSTOPLeader(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			const ttl = time.Second
			p := startWorker(t, "leader", map[string]string{
				"FAULTS_DSN": iso.DSN, "FAULTS_ROLE": "stopelect", "FAULTS_NAME": "frozen-office",
				"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "60s",
			})
			var oldTerm int64
			if _, err := fmt.Sscanf(nextLine(t, p, "the leader's election"), "held %d", &oldTerm); err != nil {
				t.Fatal(err)
			}
			pid := p.cmd.Process.Pid
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stoppedAt := time.Now()
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
			rival, err := election.New(iso.DB, "frozen-office", &election.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()
			ctx, cancel := context.WithTimeout(context.Background(), ttl+2*time.Second)
			defer cancel()
			term, err := rival.Campaign(ctx, "rival")
			if err != nil {
				t.Fatalf("no rival was elected within TTL + 2 s of the freeze: %v", err)
			}
			electedAfter := time.Since(stoppedAt)
			if int64(term.Token()) <= oldTerm {
				t.Fatalf("rival's term %d is not after the frozen leader's %d", term.Token(), oldTerm)
			}
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			lost := nextLine(t, p, "the resumed leader's loss")
			proclaim := nextLine(t, p, "the resumed leader's proclaim")
			if !strings.HasPrefix(lost, "lost ") || !strings.Contains(lost, "lost") || strings.Contains(lost, "<nil>") {
				t.Errorf("resumed leader said %q, want its term lost", lost)
			}
			if !strings.Contains(proclaim, "not the leader") {
				t.Errorf("resumed leader's proclaim said %q, want ErrNotLeader", proclaim)
			}
			if l, err := rival.Leader(context.Background()); err != nil || l.Value != "rival" || l.Term != term.Token() {
				t.Errorf("leader after the resumed one proclaimed: %+v, %v; want the rival", l, err)
			}
			t.Logf("a rival was elected %v after the freeze (TTL %v); resumed leader: %s; %s",
				electedAfter.Round(time.Millisecond), ttl, lost, proclaim)
		})
	}
}

// nextLine returns the worker's next stdout line, failing t after 20 s.
func nextLine(t *testing.T, p *proc, what string) string {
	t.Helper()
	select {
	case line := <-p.lines:
		return line
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	return ""
}
