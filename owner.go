package dblock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
)

// Owner identity. An owner is an opaque string compared byte for byte; nothing
// else is trusted about it. By default every acquisition gets a fresh owner, so
// two goroutines never re-enter each other's lock by accident. Reentrancy happens
// only when the caller names the same owner again (WithOwner, or an owner in the
// context through ContextWithOwner).

var hostPID = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}()

// NewOwner returns a fresh owner: host:pid:<128 random bits in hex>. The host
// and pid are for people reading `dblock status`; uniqueness comes from the
// random part.
func NewOwner() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read never fails on supported platforms (Go 1.24+ panics
		// inside it instead), so this is unreachable; keep a clear message.
		panic("dblock: crypto/rand failed: " + err.Error())
	}
	return hostPID + ":" + hex.EncodeToString(b[:])
}

type ownerKey struct{}

// ContextWithOwner returns a context that makes acquisitions under it use owner
// (unless WithOwner overrides it), so nested calls down a call chain re-enter
// the same lock.
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner set by ContextWithOwner, if any.
func OwnerFromContext(ctx context.Context) (string, bool) {
	o, ok := ctx.Value(ownerKey{}).(string)
	return o, ok && o != ""
}
