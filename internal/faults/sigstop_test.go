package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
)

// stopHolder is the worker body of TestFaultSIGSTOPLeaseHolder: it acquires
// name with a renewed lease and then, every 20 ms, writes its token into
// fenced_writes in a transaction guarded by optimistic.Guard, printing
// "held TOKEN", then "rejected ERR" or "lost ERR" when a write is refused or
// the lease reports its loss.
func stopHolder(ctx context.Context, db *dialect.DB, name string, ttl time.Duration) int {
	l, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer l.Close()
	fmt.Println("ready")
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lease, err := l.Acquire(actx, name, dblock.WithTTL(ttl), dblock.WithRenewal(true))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("held %d\n", lease.Token())
	q := "INSERT INTO fenced_writes (token) VALUES (" + db.Dialect.Placeholder(1) + ")"
	reportedLoss := false
	for ctx.Err() == nil {
		if !reportedLoss {
			select {
			case <-lease.Done():
				fmt.Printf("lost %v\n", strings.ReplaceAll(fmt.Sprint(lease.Err()), "\n", " "))
				reportedLoss = true
			default:
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		tx, err := db.BeginTxx(wctx, nil)
		if err == nil {
			if gerr := l.Guard(wctx, tx, lease); gerr != nil {
				_ = tx.Rollback()
				wcancel()
				fmt.Printf("rejected %v\n", strings.ReplaceAll(gerr.Error(), "\n", " "))
				return 0
			}
			if _, err = tx.ExecContext(wctx, q, int64(lease.Token())); err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		wcancel()
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// TestFaultSIGSTOPLeaseHolder freezes (SIGSTOP) a process that holds a
// renewed 1 s lease and keeps writing guarded, fenced rows, for 3 s. A rival
// acquires the name meanwhile (with a greater token) and writes. When the
// holder is resumed (SIGCONT) it must find its lease lost, and its next
// guarded write must be refused: no row with the old token is written after
// the rival's first row.
func TestFaultSIGSTOPLeaseHolder(t *testing.T) {
	for _, kind := range serverKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ddl := "CREATE TABLE fenced_writes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, token bigint NOT NULL)"
			if kind == dialect.MySQL {
				ddl = "CREATE TABLE fenced_writes (id bigint AUTO_INCREMENT PRIMARY KEY, token bigint NOT NULL)"
			}
			if _, err := iso.DB.ExecContext(ctx, ddl); err != nil {
				t.Fatal(err)
			}
			const ttl = time.Second
			p := startWorker(t, "stopped", map[string]string{
				"FAULTS_DSN": iso.DSN, "FAULTS_ROLE": "stophold", "FAULTS_NAME": "frozen",
				"FAULTS_TTL": ttl.String(), "FAULTS_LIFETIME": "60s",
			})
			var oldTok int64
			select {
			case line := <-p.lines:
				if _, err := fmt.Sscanf(line, "held %d", &oldTok); err != nil {
					t.Fatalf("worker said %q", line)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the worker did not acquire the name")
			}
			time.Sleep(200 * time.Millisecond)
			if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped := true
			defer func() {
				if stopped {
					_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
				}
			}()
			rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()
			got, _ := pollAcquire(t, rival, "frozen", 3*ttl)
			if got == nil {
				t.Fatal("the rival never got the name from the frozen holder")
			}
			if int64(got.Token()) <= oldTok {
				t.Fatalf("rival token %d is not greater than the frozen holder's %d", got.Token(), oldTok)
			}
			var rivalFirst int64
			if err := iso.DB.GetContext(ctx, &rivalFirst, iso.DB.Rebind("INSERT INTO fenced_writes (token) VALUES (?) RETURNING id"), int64(got.Token())); err != nil {
				// MySQL has no RETURNING on INSERT.
				res, err := iso.DB.ExecContext(ctx, "INSERT INTO fenced_writes (token) VALUES (?)", int64(got.Token()))
				if err != nil {
					t.Fatal(err)
				}
				if rivalFirst, err = res.LastInsertId(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2 * time.Second)
			if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			stopped = false
			var lost, rejected string
			deadline := time.After(20 * time.Second)
			for rejected == "" {
				select {
				case line := <-p.lines:
					switch {
					case strings.HasPrefix(line, "lost "):
						lost = line
					case strings.HasPrefix(line, "rejected "):
						rejected = line
					}
				case <-deadline:
					t.Fatalf("the resumed holder's writes were not refused within 20 s (lost: %q)", lost)
				}
			}
			if !strings.Contains(rejected, "not held") {
				t.Errorf("refusal %q does not say the lock is not held", rejected)
			}
			var late int
			if err := iso.DB.GetContext(ctx, &late, iso.DB.Rebind("SELECT count(*) FROM fenced_writes WHERE token = ? AND id > ?"), oldTok, rivalFirst); err != nil {
				t.Fatal(err)
			}
			if late != 0 {
				t.Fatalf("%d writes with the old token %d committed after the rival's first write", late, oldTok)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatal("test ran out of time")
			}
			t.Logf("resumed holder: %s; %s", lost, rejected)
		})
	}
}
