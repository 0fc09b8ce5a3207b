package main

import (
	"context"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// keyFloorAsync is the best hand-written lease on PostgreSQL: the floor's
// durable acquire, and a release committed with synchronous_commit off, so
// one log flush per acquire+release, as dblock's release does. Issue 18's
// fallback bar compares dblock's optimistic mode with it.
const keyFloorAsync = "floor-async"

// pgFloorReleaseAsync is pgFloorRelease committed asynchronously.
const pgFloorReleaseAsync = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE name = $1 AND owner = $2 AND version = $3`

func init() {
	register(&scenario{
		key: keyFloorAsync, order: 12, kinds: []store.Kind{store.Postgres},
		title: "floor, best case: upsert + CAS update committed asynchronously (hand-written)",
		about: "The floor with its release committed with synchronous_commit off (the acquire stays " +
			"durable): one log flush per acquire+release, as dblock's lease release does. The best " +
			"hand-written lease on PostgreSQL, and the reference of the bar when 1.5× the floor is out of reach.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			return floorInstance(e, "floor-async", floorReleaseAsync), nil
		},
	})
}

// floorReleaseAsync frees the floor's row, committing without a flush.
func floorReleaseAsync(ctx context.Context, db *dialect.DB, name, owner string, version int64) error {
	return floorExec(ctx, db, pgFloorReleaseAsync, name, owner, version)
}
