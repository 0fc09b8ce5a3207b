package optimistic_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// floorSQL is the hand-written two-statement floor: an upsert that takes a
// free or expired row, and a CAS update that frees it. Both commit durably.
var floorSQL = map[store.Kind][2]string{
	store.Postgres: {
		`INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
VALUES ($1, $2, 1, 1, 'optimistic', now(), now() + interval '30 seconds', now())
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, reentry = 1, version = dblock_locks.version + 1,
    acquired_at = now(), expires_at = excluded.expires_at, updated_at = now()
WHERE dblock_locks.owner IS NULL OR dblock_locks.expires_at <= now()
RETURNING version`,
		`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now()
WHERE name = $1 AND owner = $2 AND version = $3`,
	},
	store.MySQL: {
		`INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
VALUES (?, ?, 1, LAST_INSERT_ID(1), 'optimistic', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    version = LAST_INSERT_ID(IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), version + 1, version)),
    reentry = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, reentry),
    expires_at = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at),
    owner = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner)`,
		`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ?`,
	},
	store.SQLite: {
		`INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
VALUES (?1, ?2, 1, 1, 'optimistic', unixepoch('subsec') * 1000000, unixepoch('subsec') * 1000000 + 30000000, unixepoch('subsec') * 1000000)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, reentry = 1, version = version + 1,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, updated_at = excluded.updated_at
WHERE owner IS NULL OR expires_at <= unixepoch('subsec') * 1000000
RETURNING version`,
		`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = unixepoch('subsec') * 1000000
WHERE name = ?1 AND owner = ?2 AND version = ?3`,
	},
}

func floorAcquireRelease(b *testing.B, db *dialect.DB, name, owner string) {
	ctx := context.Background()
	stmts := floorSQL[store.Of(db).Dialect.Kind()]
	var version int64
	if store.Of(db).Dialect.Kind() == store.MySQL {
		r, err := db.SQL().ExecContext(ctx, stmts[0], name, owner)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			b.Fatal("floor: not acquired")
		}
		version, _ = r.LastInsertId()
	} else if err := db.SQL().QueryRowContext(ctx, stmts[0], name, owner).Scan(&version); err != nil {
		b.Fatal(err)
	}
	r, err := db.SQL().ExecContext(ctx, stmts[1], name, owner, version)
	if err != nil {
		b.Fatal(err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		b.Fatal("floor: release matched no row")
	}
}

// BenchmarkAcquireRelease measures one uncontended Acquire+Release beside
// the hand-written floor on the same database in the same run.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			l, err := optimistic.New(iso.DB, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = l.Close() }()
			ctx := context.Background()
			b.Run("floor", func(b *testing.B) {
				name, owner := locktest.RandomName("floor"), dblock.NewOwner()
				b.ReportAllocs()
				for b.Loop() {
					floorAcquireRelease(b, iso.DB, name, owner)
				}
			})
			b.Run("dblock", func(b *testing.B) {
				name := locktest.RandomName("bench")
				b.ReportAllocs()
				for b.Loop() {
					lease, err := l.TryAcquire(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("dblock-ttl", func(b *testing.B) {
				name := locktest.RandomName("bench")
				b.ReportAllocs()
				for b.Loop() {
					lease, err := l.TryAcquire(ctx, name, dblock.WithTTL(dblock.TTLDefault), dblock.WithMaxHold(dblock.TTLDefault))
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkContended runs 8 goroutines on one name; ns/op is per acquisition.
func BenchmarkContended(b *testing.B) {
	for _, kind := range dbtest.Kinds {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			l, err := optimistic.New(iso.DB, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = l.Close() }()
			ctx := context.Background()
			name := locktest.RandomName("contended")
			b.ReportAllocs()
			var next sync.Mutex
			remaining := b.N
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						next.Lock()
						if remaining == 0 {
							next.Unlock()
							return
						}
						remaining--
						next.Unlock()
						lease, err := l.Acquire(ctx, name)
						if err != nil {
							b.Error(err)
							return
						}
						if err := lease.Release(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkPostgresReleaseNotify measures what pg_notify adds to an
// uncontended release (the acquire is not timed): the release statement as
// shipped, and the same statement without the notification.
func BenchmarkPostgresReleaseNotify(b *testing.B) {
	iso := dbtest.New(b, store.Postgres)
	ctx := context.Background()
	withNotify := iso.Store().Dialect.Lease().Release
	i := strings.Index(withNotify, "RETURNING")
	without := withNotify[:i] + "RETURNING true"
	for _, c := range []struct{ name, release string }{{"notify", withNotify}, {"no-notify", without}} {
		b.Run(c.name, func(b *testing.B) {
			name, owner := locktest.RandomName("notify"), dblock.NewOwner()
			for range b.N {
				b.StopTimer()
				r, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: dblock.TTLDefault})
				if err != nil || !r.Acquired {
					b.Fatal(r, err)
				}
				b.StartTimer()
				var ok bool
				if err := iso.Store().QueryRowContext(ctx, c.release, name, owner, int64(r.Token)).Scan(&ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
