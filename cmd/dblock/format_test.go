package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

func TestHuman(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{
		-time.Second:                          "0ms",
		850 * time.Millisecond:                "850ms",
		12*time.Second + 400*time.Millisecond: "12s",
		4*time.Minute + 12*time.Second:        "4m12s",
		3*time.Hour + 5*time.Minute:           "3h05m",
		52 * time.Hour:                        "2d04h",
	}
	for d, want := range cases {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("exec: %w: first\nsecond", dblock.ErrSchemaMissing)
	if got, want := oneLine(err.Error()), "dblock: exec: schema missing: first; second"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{usageErrorf("bad"), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrInvalidOption), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrInvalidName), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrSchemaMissing), exitSchema},
		{fmt.Errorf("x: %w", dblock.ErrUnavailable), exitUnavailable},
		{&dblock.HeldError{Name: "n"}, exitNotAcquired},
		{&dblock.LostError{Name: "n", Reason: dblock.ErrExpired}, exitLost},
		{withCode(exitNotFound, errors.New("no such command")), exitNotFound},
	}
	for _, tc := range cases {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestNotAcquiredLine checks the exit-75 line: the time left is counted on
// the database clock read with the holder, never on this machine's.
func TestNotAcquiredLine(t *testing.T) {
	t.Parallel()
	dbNow := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC) // Far from time.Now().
	cases := []struct {
		h    holder
		wait optDuration
		want string
	}{
		{holder{held: &dblock.HeldError{Name: "n", Owner: "o", Mode: "optimistic", ExpiresAt: dbNow.Add(17 * time.Second)}, now: dbNow},
			optDuration{}, `"n" is held by owner "o" (optimistic) until 2001-02-03T04:05:23Z (in 17s)`},
		{holder{held: &dblock.HeldError{Name: "n", Owner: "o", ExpiresAt: dbNow.Add(-time.Second)}, now: dbNow},
			optDuration{d: time.Second, set: true}, `"n" is held by owner "o" until 2001-02-03T04:05:05Z (expired); gave up after waiting 1s`},
		{holder{held: &dblock.HeldError{Name: "n", Owner: "o", ExpiresAt: dbNow}},
			optDuration{}, `"n" is held by owner "o" until 2001-02-03T04:05:06Z`},
		{holder{held: &dblock.HeldError{Name: "n", Mode: dblock.ModePessimistic}, now: dbNow},
			optDuration{set: true}, `"n" is held by a pessimistic transaction (no lease: until its transaction ends)`},
		{holder{held: &dblock.HeldError{Name: "n", Mode: dblock.ModePessimistic}, now: dbNow, writeLocked: true},
			optDuration{}, `"n" is held by a pessimistic transaction: the database is write-locked by a transaction (SQLite: a pessimistic hold locks the whole file until it ends)`},
		{holder{}, optDuration{}, `"n" not acquired: boom`},
	}
	for _, tc := range cases {
		if got := notAcquiredLine("n", tc.h, errors.New("boom"), tc.wait).Error(); got != tc.want {
			t.Errorf("notAcquiredLine(%+v) =\n%s\nwant\n%s", tc.h, got, tc.want)
		}
	}
}

func TestLostReason(t *testing.T) {
	t.Parallel()
	lost := fmt.Errorf("x: %w", &dblock.LostError{Name: "n", Reason: dblock.ErrForceReleased})
	if got := oneLine(lostReason(lost).Error()); got != "dblock: released by an administrator" {
		t.Errorf("lostReason = %q", got)
	}
	other := errors.New("boom")
	if got := lostReason(other); got != other {
		t.Errorf("lostReason(%v) = %v", other, got)
	}
}

// TestStatusUnchecked: names that could not be checked for a transaction
// hold are unknown, never free, whether or not a lease row names them; a
// live lease is a hold whatever the probe could do; and a probe limited to
// the first rows marks the listing unchecked without naming any name.
func TestStatusUnchecked(t *testing.T) {
	t.Parallel()
	now := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	rows := []store.LockRow{
		{Name: "live", Owner: "o", Token: 3, Reentry: 1, Mode: dblock.ModeOptimistic, ExpiresAt: now.Add(time.Minute), Now: now},
		{Name: "expired", Owner: "o", Token: 2, Reentry: 1, Mode: dblock.ModeOptimistic, ExpiresAt: now.Add(-time.Minute), Now: now},
	}
	names := []string{"live", "expired", "none", "none", "queued"}
	waiters := []store.WaiterRow{{Name: "queued", Owner: "w", Position: 1, CreatedAt: now, Now: now}}
	st := statusData{now: now, locks: mergeTxHolds(now, rows, store.TxHolds{}), waiters: waiters, unchecked: uncheckedDenied}
	st.unknown = uncheckedNames(names, rows)
	st.free = freeNames(names, st)
	if got := strings.Join(st.unknown, ","); got != "expired,none,queued" {
		t.Errorf("unknown = %q, want the names no live lease holds", got)
	}
	if len(st.free) != 0 {
		t.Errorf("free = %q, want none", st.free)
	}
	doc := buildStatus(st)
	if doc.Checked || doc.UncheckedReason == nil || *doc.UncheckedReason != "permission_denied" || len(doc.Unknown) != 3 ||
		doc.Unknown[1] != (unknownJSON{Name: "none", Reason: "permission_denied"}) || len(doc.Locks) != 2 {
		t.Errorf("JSON of an unchecked status: %+v", doc)
	}
	var b strings.Builder
	if err := (&app{stdout: &b}).printStatus(st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "\nunknown: expired, none, queued (not checked for a transaction hold: this role may not lock rows") ||
		!strings.Contains(out, "(transaction holds not checked: ") || strings.Contains(out, "free") {
		t.Errorf("table of an unchecked status:\n%s", out)
	}

	limited := statusData{now: now, unchecked: uncheckedLimit}
	doc = buildStatus(limited)
	if doc.Checked || doc.UncheckedReason == nil || *doc.UncheckedReason != "probe_limit" || len(doc.Unknown) != 0 || doc.Unknown == nil {
		t.Errorf("JSON of a limited probe: %+v", doc)
	}
	b.Reset()
	if err := (&app{stdout: &b}).printStatus(limited); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "(probed the first 1000 rows without a live lease for transaction holds; name a lock to probe it)") {
		t.Errorf("table of a limited probe:\n%s", out)
	}
	if doc := buildStatus(statusData{now: now}); !doc.Checked || doc.UncheckedReason != nil {
		t.Errorf("JSON of a checked status: %+v", doc)
	}
}

// TestStatusReservation: a held name that a waiter reserved shows the
// reservation, in the table and in the JSON; a lapsed one shows nothing.
func TestStatusReservation(t *testing.T) {
	t.Parallel()
	now := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	rows := []store.LockRow{
		{Name: "kept", Owner: "o", Token: 3, Reentry: 1, Mode: dblock.ModeOptimistic, ExpiresAt: now.Add(time.Minute), Now: now,
			Next: store.Reservation{Owner: "w", Since: now.Add(-5 * time.Second), Until: now.Add(time.Second)}},
		{Name: "lapsed", Owner: "o", Token: 4, Reentry: 1, Mode: dblock.ModeOptimistic, ExpiresAt: now.Add(time.Minute), Now: now,
			Next: store.Reservation{Owner: "x", Since: now.Add(-5 * time.Second), Until: now.Add(-time.Second)}},
	}
	st := statusData{now: now, locks: mergeTxHolds(now, rows, store.TxHolds{})}
	doc := buildStatus(st)
	if len(doc.Locks) != 2 || doc.Locks[0].ReservedFor != "w" || doc.Locks[0].ReservedUntil != "2001-02-03T04:05:07.000000Z" ||
		doc.Locks[0].WaitingSince != "2001-02-03T04:05:01.000000Z" || doc.Locks[1].ReservedFor != "" {
		t.Errorf("JSON of reserved names: %+v", doc.Locks)
	}
	var b strings.Builder
	if err := (&app{stdout: &b}).printStatus(st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "kept: next for w (waiting 5s; reservation lapses in 1s unless renewed)") ||
		strings.Contains(out, "next for x") {
		t.Errorf("table of reserved names:\n%s", out)
	}
}

// TestStatusReservedFree: a free name that a waiter keeps is listed under
// "reserved" with its waiter, never under "free", in the JSON and in the
// table.
func TestStatusReservedFree(t *testing.T) {
	t.Parallel()
	now := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	st := statusData{now: now, reserved: []store.LockRow{{Name: "kept", Now: now,
		Next: store.Reservation{Owner: "w", Since: now.Add(-5 * time.Second), Until: now.Add(time.Second)}}}}
	st.free = freeNames([]string{"kept", "open"}, st)
	if strings.Join(st.free, ",") != "open" {
		t.Errorf("free = %q, want only the name nobody keeps", st.free)
	}
	doc := buildStatus(st)
	want := reservedJSON{Name: "kept", ReservedFor: "w", WaitingSince: "2001-02-03T04:05:01.000000Z", ReservedUntil: "2001-02-03T04:05:07.000000Z"}
	if len(doc.Reserved) != 1 || doc.Reserved[0] != want || len(doc.Locks) != 0 {
		t.Errorf("JSON of a reserved free name: %+v", doc)
	}
	if doc := buildStatus(statusData{now: now}); doc.Reserved == nil {
		t.Errorf("JSON without reserved names: %+v, want an empty list", doc)
	}
	var b strings.Builder
	if err := (&app{stdout: &b}).printStatus(st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "kept: free, kept for w (waiting 5s; reservation lapses in 1s unless renewed)") ||
		!strings.Contains(out, "free: open") {
		t.Errorf("table of a reserved free name:\n%s", out)
	}
}
