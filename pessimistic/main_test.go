package pessimistic_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

func TestMain(m *testing.M) {
	locktest.WorkerMain(func(db *dialect.DB) dblock.Locker {
		if os.Getenv(envLocktestMode) == modeMixed {
			return newMixed(db)
		}
		return mustNew(db).AsLocker()
	})
	helperMain()
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}

func mustNew(db *dialect.DB) *pessimistic.Locker {
	l, err := pessimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	return l
}

// helperMain runs this test binary as a helper process when asked to (see
// the SIGKILL test) and never returns then.
func helperMain() {
	if os.Getenv(envHelper) == "" {
		return
	}
	os.Exit(runHelper())
}

// envLocktestMode is the variable through which locktest.RunProcesses tells
// its workers the mode it was given.
const envLocktestMode = "DBLOCK_LOCKTEST_MODE"

// modeMixed makes workers alternate between optimistic and pessimistic
// acquisitions of the same name.
const modeMixed = "mixed"

// mixed is a dblock.Locker that alternates between an optimistic and a
// pessimistic Locker on every call.
type mixed struct {
	p, o dblock.Locker
	n    atomic.Int64
}

func newMixed(db *dialect.DB) *mixed {
	o, err := optimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	return &mixed{p: mustNew(db).AsLocker(), o: o}
}

func (m *mixed) pick() dblock.Locker {
	if m.n.Add(1)%2 == 0 {
		return m.p
	}
	return m.o
}

func (m *mixed) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return m.pick().Acquire(ctx, name, opts...)
}

func (m *mixed) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return m.pick().TryAcquire(ctx, name, opts...)
}

func (m *mixed) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return m.pick().Do(ctx, name, fn, opts...)
}

func (m *mixed) Close() error {
	return errors.Join(m.p.Close(), m.o.Close())
}
