package main

import (
	"context"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// execSpec is what exec takes: a lock of a mode, the read lock of a name
// (--read), or permits of a semaphore (--semaphore --limit N --permits K).
type execSpec struct {
	mode            string // Resolved by resolve.
	read, semaphore bool
	fair            bool // --fair with --read or --semaphore (the fair mode's is its mode).
	limit, permits  int
}

// resolve checks the flags together and sets s.mode, which it returns.
func (s *execSpec) resolve(modeFlag string, fair bool) (string, error) {
	switch {
	case s.read && s.semaphore:
		return "", usageErrorf("exec: --read and --semaphore exclude each other")
	case s.read && modeFlag == dblock.ModePessimistic && !fair:
		s.mode = dblock.ModePessimistic // The pessimistic mode's shared form.
	case (s.read || s.semaphore) && modeFlag != dblock.ModeOptimistic:
		return "", usageErrorf("exec: --semaphore takes no --mode, and --read only --mode pessimistic (without --fair)")
	case !s.semaphore && s.limit != 0:
		return "", usageErrorf("exec: --limit goes with --semaphore")
	case !s.semaphore && s.permits != 1:
		return "", usageErrorf("exec: --permits goes with --semaphore")
	case s.semaphore && s.limit < 1:
		return "", usageErrorf("exec: --semaphore needs --limit N (at least 1)")
	case s.semaphore && (s.permits < 1 || s.permits > s.limit):
		return "", usageErrorf("exec: --permits %d: want 1 to the limit %d", s.permits, s.limit)
	case s.read:
		s.mode, s.fair = dblock.ModeRead, fair
	case s.semaphore:
		s.mode, s.fair = dblock.ModeSemaphore, fair
	default:
		m, err := modeOf(modeFlag, fair)
		if err != nil {
			return "", err
		}
		s.mode = m
	}
	return s.mode, nil
}

// readLocker takes read locks as a dblock.Locker.
type readLocker struct{ *rwlock.Locker }

func (r readLocker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return r.AcquireRead(ctx, name, opts...)
}

func (r readLocker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return r.TryAcquireRead(ctx, name, opts...)
}

func (r readLocker) Do(ctx context.Context, name string, fn func(context.Context) error, opts ...dblock.Option) error {
	return r.DoRead(ctx, name, fn, opts...)
}

// semLocker takes a fixed number of a semaphore's permits as a dblock.Locker.
type semLocker struct {
	l              *semaphore.Locker
	limit, permits int
}

func (s semLocker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return s.l.Acquire(ctx, name, s.limit, s.permits, opts...)
}

func (s semLocker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return s.l.TryAcquire(ctx, name, s.limit, s.permits, opts...)
}

func (s semLocker) Do(ctx context.Context, name string, fn func(context.Context) error, opts ...dblock.Option) error {
	return s.l.Do(ctx, name, s.limit, s.permits, fn, opts...)
}

func (s semLocker) Close() error { return s.l.Close() }
