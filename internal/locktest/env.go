package locktest

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock"
)

// Env is the store behind the Lockers under test, as the checks reach it:
// a database for the SQL modes (Run and RunOn build it), or an in-memory
// stand-in (dblocktest's Database, through RunEnv). One Env serves one
// check.
type Env interface {
	// Locker returns a new Locker on the store; other asks for one as
	// another process would have it (its own connections). The suite
	// closes it at the end of the check.
	Locker(t *testing.T, other bool) dblock.Locker
	// TakeOver has owner take name's hold behind its holder's back, with a
	// newer token and the lease unexpired (as after a stall past the lease).
	TakeOver(t *testing.T, ctx context.Context, name, owner string)
	// HolderOwner returns the owner holding name ("" when free).
	HolderOwner(t *testing.T, ctx context.Context, name string) string
	// ForceRelease frees name as an administrator does.
	ForceRelease(t *testing.T, ctx context.Context, name string)
	// WaitExpired waits until name's lease has run out by the store's clock.
	WaitExpired(t *testing.T, ctx context.Context, name string)
	// ReleaseAs runs the release of name for (owner, token), as a stranger
	// holding those values could, and reports whether it freed the name.
	ReleaseAs(ctx context.Context, name, owner string, token dblock.Token) (bool, error)
	// Reap deletes name's row once it is free, as the reaper's idle pass
	// does (a store without such rows does nothing).
	Reap(t *testing.T, ctx context.Context, name string)
	// Residue counts what calls leave in the store: names with a row, held
	// names, and fair-queue waiters.
	Residue(t *testing.T) (names, held, waiters int)
	// InUse returns the store's connections in use.
	InUse() int
}

// RunEnv runs the checks that need no database of their own on the stores
// newEnv returns (one per check): every check but those that block a row
// with another transaction, read the database's clock, or take a Guard.
func RunEnv(t *testing.T, newEnv func(t *testing.T) Env, caps Caps) {
	t.Helper()
	caps.Guard = nil
	runChecks(t, caps, false, func(t *testing.T, c check) {
		c.fn(t, &suite{t: t, env: newEnv(t), caps: caps})
	})
}
