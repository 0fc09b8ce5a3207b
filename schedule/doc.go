// Package schedule runs cron jobs once per slot across the replicas of a
// service: every replica adds the same jobs to a Scheduler on the same
// database, and each slot (a job's nominal firing time) runs on one of them,
// at most once, whatever the replicas' clocks say.
//
//	s, _ := schedule.New(db, nil)
//	_ = s.Add("0 3 * * *", "nightly-report", report, schedule.AtMostFor(time.Hour), schedule.AtLeastFor(time.Minute))
//	s.Start()
//
// How a slot runs. When a replica's clock reaches a slot, the replica skips
// it if the job's last slot, recorded in the database (dblock_slots), is that
// one or later; otherwise it takes the job's lock (a lease named after the
// job, in the namespace of every mode), claims the slot with a
// compare-and-set on the recorded one, runs the job and ends the lease. A
// replica whose clock is seconds behind fires the same slot later and finds
// it recorded: it never runs twice. A take or a claim whose answer was lost
// (the connection broke after it may have committed) is read back: the
// lock's row naming the run's owner is its lease, and the slot recorded
// while that lease holds the lock is its claim, so the slot runs rather
// than being skipped everywhere. A replica that finds the lock held by a
// run of the same or a later slot skips (it does not wait); one that finds a
// run of an earlier slot waits for it, until its own next slot.
//
// Bounds, by the database clock: AtMostFor caps a run (the lease is renewed
// while the job runs, never past the bound; the job's context is cancelled
// there and the lock runs out, even if the job hangs); AtLeastFor keeps the
// lock until that long after the run started even when the job ended sooner
// (the release leaves the lease held until then). A replica that dies
// mid-job frees the lock when its lease (Config.TTL) runs out, and the next
// slot runs on time. CatchUp runs once, at Start, the latest slot due that
// no replica ran.
//
// A Scheduler fires its jobs on its own clock (Config.Now); Job wraps a job
// as a cron.Job for a robfig/cron Cron of the caller's instead.
//
// Slots of @every schedules are multiples of the interval since the Unix
// epoch, so that replicas started at different times agree on them. Slot
// tells a job which slot it runs for.
package schedule
