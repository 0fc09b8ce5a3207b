package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
)

// startProfile writes a CPU profile of the whole run to path (-cpuprofile);
// stop ends it. Every sample carries the labels of the cell that ran it
// (profileLabels), so one cell's cost reads apart from its references':
//
//	go tool pprof -tagfocus cell=opt-acquire/32 bench cpu.out
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpu profile: %v\n", err)
		}
	}, nil
}

// inCell runs f with the goroutine labels db and cell (key/goroutines,
// "/one" where every goroutine takes one name). The goroutines f starts,
// the cell's workers and its Lockers' own, inherit them.
func inCell(ctx context.Context, db string, c *cell, f func(context.Context)) {
	label := c.sc.key + "/" + strconv.Itoa(c.goroutines)
	if c.contended {
		label += "/one"
	}
	pprof.Do(ctx, pprof.Labels("db", db, "cell", label), f)
}
