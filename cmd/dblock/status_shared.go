package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/dblock-go/dblock/internal/store"
)

// The shared holds status shows besides the locks: each reader of a name
// held for reading (whose row shows owner "" and mode read), and each grant
// of a semaphore's permits.

// readerJSON is one reader's lease in status --json.
type readerJSON struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Token      int64  `json:"token"`
	Reentry    int    `json:"reentry"`
	AcquiredAt string `json:"acquired_at"`
	ExpiresAt  string `json:"expires_at"`
}

// permitJSON is one grant of a semaphore's permits in status --json.
type permitJSON struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Token      int64  `json:"token"`
	Permits    int    `json:"permits"`
	AcquiredAt string `json:"acquired_at"`
	ExpiresAt  string `json:"expires_at"`
}

// sharedHolds are the unexpired shares and grants of names (all without
// names).
type sharedHolds struct {
	readers []store.ShareInfo
	permits []store.PermitInfo
}

// readShared reads the shared holds of names (every one without names).
func readShared(ctx context.Context, db *store.DB, names []string) (sharedHolds, error) {
	var (
		h   sharedHolds
		err error
	)
	if h.readers, err = db.ListShares(ctx, names); err != nil {
		return h, err
	}
	h.permits, err = db.ListPermits(ctx, names)
	return h, err
}

// busy reports whether name has a shared hold.
func (h sharedHolds) busy(name string) bool {
	return slices.ContainsFunc(h.readers, func(s store.ShareInfo) bool { return s.Name == name }) ||
		slices.ContainsFunc(h.permits, func(p store.PermitInfo) bool { return p.Name == name })
}

func (h sharedHolds) json() ([]readerJSON, []permitJSON) {
	readers, permits := []readerJSON{}, []permitJSON{}
	for _, s := range h.readers {
		readers = append(readers, readerJSON{Name: s.Name, Owner: s.Owner, Token: s.Token, Reentry: s.Reentry,
			AcquiredAt: s.AcquiredAt.UTC().Format(jsonTime), ExpiresAt: s.ExpiresAt.UTC().Format(jsonTime)})
	}
	for _, p := range h.permits {
		permits = append(permits, permitJSON{Name: p.Name, Owner: p.Owner, Token: p.ID, Permits: p.Permits,
			AcquiredAt: p.AcquiredAt.UTC().Format(jsonTime), ExpiresAt: p.ExpiresAt.UTC().Format(jsonTime)})
	}
	return readers, permits
}

// print writes the readers' and the semaphores' tables (nothing when there
// are none).
func (h sharedHolds) print(tw *tabwriter.Writer, st statusData) {
	if len(h.readers) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "READING\tOWNER\tTOKEN\tREENTRY\tACQUIRED\tEXPIRES")
		for _, s := range h.readers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, s.Owner, s.Token, s.Reentry, ago(st.now.Sub(s.AcquiredAt)), "in "+human(s.ExpiresAt.Sub(st.now)))
		}
	}
	if len(h.permits) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "SEMAPHORE\tOWNER\tTOKEN\tPERMITS\tACQUIRED\tEXPIRES")
		for _, p := range h.permits {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", p.Name, p.Owner, p.ID, p.Permits, ago(st.now.Sub(p.AcquiredAt)), "in "+human(p.ExpiresAt.Sub(st.now)))
		}
	}
}
