// Package election elects one leader among the replicas of a service, on
// the database they already share: "one replica does the background work".
//
// An election is a name in the dblock_locks table, and its office is a
// lease on that row: the leader is the lease's holder, its term is the
// lease's fencing token, and its value (what it campaigned with or last
// proclaimed) is the lease's metadata. So `dblock status` lists the leader
// and the reaper frees a dead leader's expired term, as for any lock.
//
//	e, err := election.New(db, "billing-scheduler", nil) // one per candidate
//	if err != nil {
//		return err
//	}
//	defer e.Close()
//	return e.Run(ctx, hostname, func(ctx context.Context) error {
//		return scheduler.Serve(ctx) // until shutdown, or until the term is lost
//	})
//
// The calls follow etcd's concurrency.Election: Campaign blocks until
// elected and returns the term (a *dblock.Lease: Done, Err, Token;
// Release resigns), Proclaim changes the leader's value, Resign hands the
// office over at once (on PostgreSQL waiting candidates are woken by the
// release; elsewhere they poll), Leader reads the leader, and Observe
// streams its changes. Run is the loop every user writes otherwise:
// campaign, run fn while the term holds, campaign again after a loss.
//
// What this package guarantees, where peers were caught out:
//   - Campaign returns a term only while it holds: won by the database's
//     clock, and before its local deadline (request start + TTL on the
//     monotonic clock), which ends no later than the database's expiry.
//     A leader stops trusting itself then, before another can be elected.
//   - Terms strictly increase per election, so they fence: a deposed
//     leader's late writes are refused by the fencing helpers (userrows,
//     optimistic.Guard) as any stale token is.
//   - Resign says whether the caller was still the leader; Proclaim by a
//     candidate that is not fails with ErrNotLeader and marks its term lost.
//   - Run campaigns again after a lost term, and resigns only after fn has
//     returned.
//   - Observe delivers terms in increasing order and ends on the latest;
//     it may skip a term that came and went between two reads, and never
//     goes back.
package election
