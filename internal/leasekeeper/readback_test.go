package leasekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
)

// TestReadBack: ReadBack tries again after a transient error and after a
// try that hangs until its own bound (a fifth of the whole), stops at once
// at an error that is neither, and gives up at the whole bound, returning
// the last try's error. The caller's context ending does not stop it.
func TestReadBack(t *testing.T) {
	const bound, first, most = 500 * time.Millisecond, time.Millisecond, 4 * time.Millisecond
	unavailable := fmt.Errorf("%w: connection reset", dblock.ErrUnavailable)
	refused := errors.New("permission denied")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := map[string]struct {
		ctx       context.Context
		fail      int   // tries that fail before one answers (-1: all)
		hang      bool  // a failing try waits for its context to end
		err       error // a failing try's error
		wantTries func(int) bool
		wantErr   error
	}{
		"transient, then an answer":  {fail: 3, err: unavailable, wantTries: func(n int) bool { return n == 4 }},
		"hung tries, then an answer": {fail: 2, hang: true, wantTries: func(n int) bool { return n == 3 }},
		"caller's context ended":     {ctx: canceled, fail: 1, err: unavailable, wantTries: func(n int) bool { return n == 2 }},
		"not transient":              {fail: -1, err: refused, wantTries: func(n int) bool { return n == 1 }, wantErr: refused},
		"every try hangs":            {fail: -1, hang: true, wantTries: func(n int) bool { return n >= 4 && n <= 5 }, wantErr: context.DeadlineExceeded},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			tries := 0
			start := time.Now()
			err := leasekeeper.ReadBack(ctx, bound, first, most, func(ctx context.Context) error {
				tries++
				if c.fail >= 0 && tries > c.fail {
					return nil
				}
				if c.hang {
					<-ctx.Done()
					return ctx.Err()
				}
				return c.err
			})
			took := time.Since(start)
			if !errors.Is(err, c.wantErr) || c.wantErr == nil && err != nil {
				t.Errorf("ReadBack = %v, want %v", err, c.wantErr)
			}
			if !c.wantTries(tries) {
				t.Errorf("ReadBack tried %d times", tries)
			}
			if took > bound+200*time.Millisecond {
				t.Errorf("ReadBack took %v, bound %v", took, bound)
			}
		})
	}
}
