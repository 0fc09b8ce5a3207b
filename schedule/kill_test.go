package schedule_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/schedule"
)

// Environment of the worker replica of TestKilledReplica.
const (
	envWorkerDSN  = "DBLOCK_SCHEDULE_WORKER_DSN"
	envWorkerFile = "DBLOCK_SCHEDULE_WORKER_FILE"
)

// killTTL is the lease of both replicas' runs in TestKilledReplica.
const killTTL = time.Second

// workerMain runs the worker replica when this process is one: it runs the
// job "killed" every second, and its run writes its slot to a file and
// hangs until the process is killed.
func workerMain() {
	dsn := os.Getenv(envWorkerDSN)
	if dsn == "" {
		return
	}
	ctx := context.Background()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := schedule.New(db, &schedule.Config{TTL: killTTL})
	if err == nil {
		err = s.Add("* * * * * *", "killed", func(ctx context.Context) error {
			slot, _ := schedule.Slot(ctx)
			if err := os.WriteFile(os.Getenv(envWorkerFile), []byte(slot.UTC().Format(time.RFC3339Nano)), 0o644); err != nil {
				return err
			}
			select {} // Hangs until SIGKILL.
		})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s.Start()
	select {}
}

// A replica SIGKILLed mid-job: its slot is not run again, the job's lock
// is free by expiry after the run's TTL, and the next slots run on time on
// the replica left.
func TestKilledReplica(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		file := filepath.Join(t.TempDir(), "running")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorkerDSN+"="+iso.DSN, envWorkerFile+"="+file)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var killedSlot time.Time
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if data, err := os.ReadFile(file); err == nil && len(data) > 0 {
				if killedSlot, err = time.Parse(time.RFC3339Nano, string(data)); err != nil {
					t.Fatal(err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the worker never ran the job: %s", out.String())
			}
		}
		// The worker's run holds the lock; this replica starts now.
		r := &runs{got: map[time.Time][]int{}}
		s := newScheduler(t, iso, &schedule.Config{TTL: killTTL})
		if err := s.Add("* * * * * *", "killed", r.job(1)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(1500 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		_ = cmd.Wait()
		time.Sleep(killTTL + 3*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.got[killedSlot]) != 0 {
			t.Fatalf("the killed run's slot %v ran again", killedSlot)
		}
		// Every slot from the lease's expiry on ran here (a second of
		// slack for the expiry by the database clock and the wait).
		from := killed.Add(killTTL + time.Second).Truncate(time.Second).Add(time.Second)
		n := 0
		for slot := from; slot.Before(killed.Add(killTTL + 2*time.Second)); slot = slot.Add(time.Second) {
			n++
			if len(r.got[slot]) != 1 {
				t.Errorf("slot %s after the killed run's lease ran out: ran %d times, want once (runs: %v)", slot.Format(time.RFC3339), len(r.got[slot]), r.got)
			}
		}
		if n == 0 || len(r.got) == 0 {
			t.Fatalf("no slot checked after the kill (runs: %v)", r.got)
		}
	})
}
