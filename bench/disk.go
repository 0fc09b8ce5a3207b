package main

import (
	"fmt"
	"os"
	"slices"
	"time"
)

// The disk's state beside each database's results. Every log flush of a
// durable commit goes to the machine's disk, and on a shared machine its
// flush latency drifts by several times from one hour to the next: a bar
// read in a slow spell and one read in a fast spell are different
// measurements (the bars whose two sides flush differently, one durable
// commit a pair against two, move with it). The bench times a flush of its
// own before and after each database's cells so that a reader can tell the
// spell a run came in.

const (
	flushProbes = 200       // flushes timed per probe
	flushBlock  = 4 << 10   // bytes written before each
	flushFile   = ".flush-" // prefix of the probe's file, in the working directory
)

// flushProbe is the latency of writing one block and calling fdatasync on a
// file in the working directory (the repository's disk: on a machine that
// runs its databases locally, usually theirs), flushProbes times.
type flushProbe struct {
	p50, p90 time.Duration
	err      error
}

func probeFlush() flushProbe {
	f, err := os.CreateTemp(".", flushFile)
	if err != nil {
		return flushProbe{err: err}
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	block := make([]byte, flushBlock)
	lat := make([]time.Duration, 0, flushProbes)
	for range flushProbes {
		t0 := time.Now()
		if _, err := f.WriteAt(block, 0); err != nil {
			return flushProbe{err: err}
		}
		if err := f.Sync(); err != nil {
			return flushProbe{err: err}
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return flushProbe{p50: lat[len(lat)/2], p90: lat[len(lat)*9/10]}
}

func (p flushProbe) String() string {
	if p.err != nil {
		return "not measured (" + p.err.Error() + ")"
	}
	return fmt.Sprintf("p50 %s, p90 %s", fmtDur(p.p50), fmtDur(p.p90))
}

// diskLine is the sentence each database's section carries.
func diskLine(before, after flushProbe) string {
	return fmt.Sprintf("Disk: a %d KiB write and fsync in the working directory, %d times: %s before the cells, %s after",
		flushBlock>>10, flushProbes, before, after)
}
