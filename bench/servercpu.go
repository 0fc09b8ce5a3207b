package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// serverComms are the process names of the database servers whose CPU the
// bench reads on this machine (PostgreSQL's backends and helpers, MariaDB's
// and MySQL's one process).
var serverComms = map[string]bool{"postgres": true, "mariadbd": true, "mysqld": true}

// clockTicks is the unit of /proc/<pid>/stat's CPU fields (USER_HZ, 100 on
// every Linux the bench runs on).
const clockTicks = 100

// serverCPU is the user+system CPU the database servers running on this
// machine have used so far, from /proc; ok is false where there is none to
// read (another OS, a remote server). PostgreSQL's backends live as long
// as the bench's connections, which outlive a round, so the difference
// over a round is the servers' work in it (the other cells' included only
// where they overlap, which the bench never does).
func serverCPU() (time.Duration, bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	found := false
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		t, ok := serverTicks(b)
		if ok {
			ticks, found = ticks+t, true
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, found
}

// serverTicks reads utime+stime from one /proc/<pid>/stat when its command
// is one of serverComms.
func serverTicks(stat []byte) (int64, bool) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || !serverComms[string(stat[open+1:end])] {
		return 0, false
	}
	// After the command: state is field 3, utime 14 and stime 15.
	f := bytes.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + s, true
}
