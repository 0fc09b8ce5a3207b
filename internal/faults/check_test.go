package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dblock-go/dblock/internal/faults/history"
)

// porcupineTimeout bounds every porcupine check. The histories here are a
// few thousand operations; a legal one is decided in milliseconds, so
// running out of time means something is wrong (an illegal history with
// many unknown outcomes makes porcupine search), and under CI it fails.
const porcupineTimeout = 10 * time.Second

// inCI reports whether CI=true (or any value but "false") is set.
func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false"
}

// checkHistory runs the O(n) token and overlap checks and porcupine on ops
// and fails t on a violation. A porcupine run that reaches no verdict within
// porcupineTimeout fails t under CI and is reported (not silently passed)
// otherwise. what names the history in messages.
func checkHistory(t *testing.T, ops []history.Op, what string) {
	t.Helper()
	start := time.Now()
	res, err := history.Check(ops, porcupineTimeout)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		t.Errorf("%s: history check: %v%s", what, err, dumpOps(t, ops))
		return
	}
	switch res {
	case porcupine.Ok:
		t.Logf("%s: %d operations linearizable (checked in %v)", what, len(ops), took)
	case porcupine.Unknown:
		msg := "%s: porcupine reached no verdict within %v on %d operations (the O(n) token and overlap checks passed)"
		if inCI() {
			t.Errorf(msg+"; CI requires a verdict%s", what, porcupineTimeout, len(ops), dumpOps(t, ops))
		} else {
			t.Logf("UNKNOWN VERDICT: "+msg, what, porcupineTimeout, len(ops))
		}
	}
}

// dumpOps writes ops (JSON, one per line) to a file in $FAULTS_DUMP_DIR,
// when set, and returns a note naming it for the failure message.
func dumpOps(t *testing.T, ops []history.Op) string {
	dir := os.Getenv("FAULTS_DUMP_DIR")
	if dir == "" {
		return " (set FAULTS_DUMP_DIR to keep the history)"
	}
	name := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".jsonl")
	var b strings.Builder
	for _, op := range ops {
		j, _ := json.Marshal(op)
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
		return fmt.Sprintf(" (dump: %v)", err)
	}
	return " (history written to " + name + ")"
}
