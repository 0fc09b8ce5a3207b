package dblock_test

import (
	"testing"

	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// modes are a Locker of each mode on one database, closed at cleanup.
type modes struct {
	opt  *optimistic.Locker
	fair *fairqueue.Locker
	pess *pessimistic.Locker
}

func newModes(t *testing.T, iso *dbtest.Isolated) modes {
	t.Helper()
	opt, err := optimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = opt.Close() })
	fair, err := fairqueue.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fair.Close() })
	pess, err := pessimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pess.Close() })
	return modes{opt: opt, fair: fair, pess: pess}
}
