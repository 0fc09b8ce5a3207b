// Package dblockgocron plugs dblock into gocron v2 (github.com/go-co-op/gocron/v2)
// as its distributed Locker and Elector. It is a module of its own, so that
// dblock itself never depends on gocron.
//
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(dblockgocron.Locker(l)))
//
// What the Locker guarantees: one run of a job at a time across the
// schedulers that share the database. gocron asks the Locker once per run
// with the job's name only, so the Locker cannot know which firing a run
// belongs to: a scheduler whose clock is behind can run the same firing
// again after a quick run ended elsewhere (gocron's own documentation warns
// of clock skew). WithMinHold narrows that window (the lock stays held that
// long after each start); for once per slot whatever the clocks, use
// package github.com/dblock-go/dblock/schedule instead.
//
// The Elector runs a campaign of an election (package election) in the
// background: only the scheduler whose candidate holds the term runs jobs,
// and another takes over when it resigns, stops or dies (after the term's
// TTL).
package dblockgocron
