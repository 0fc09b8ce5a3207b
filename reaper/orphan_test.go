package reaper

import (
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
)

// TestPassReclaimsOrphanedLease: a pass whose release of the reaper lease
// failed (or whose acquire's answer was lost), as in a database restart,
// leaves the lease held under that pass's unique owner. The next pass of the
// same Reaper frees it and works, instead of skipping until it expires; a
// lease held by another Reaper's pass is still left alone.
func TestPassReclaimsOrphanedLease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		r := newReaper(t, iso.DB, nil)
		other := r.cfg.Owner + "#0000000000000000"
		token := acquire(t, iso.DB, LeaseName, other, time.Hour)
		if st := runOnce(t, r); !st.Skipped || st.Worked {
			t.Fatalf("pass while another pass holds the lease: %+v, want skipped", st)
		}
		// The lease was this Reaper's own, from a pass whose release failed.
		r.orphan(other)
		st := runOnce(t, r)
		if !st.Worked || st.Skipped {
			t.Fatalf("pass after an orphaned lease: %+v, want it reclaimed and worked", st)
		}
		if st.Token <= token {
			t.Fatalf("pass token %d, not above the orphaned lease's %d", st.Token, token)
		}
		if h := holder(t, iso.DB, LeaseName); h.Held() {
			t.Fatalf("reaper lease still held after the pass: %+v", h)
		}
		r.mu.Lock()
		left := len(r.orphans)
		r.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d orphans remembered after the reclaim", left)
		}
	})
}
