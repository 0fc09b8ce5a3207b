package soak

import (
	"context"
	"sort"
	"testing"

	"github.com/dblock-go/dblock/internal/dbtest"
)

// section is one recorded critical section.
type section struct {
	name       string
	token      int64
	begin, end int64 // Database clock, microseconds.
	who        string
}

// checkSections reads the recorded sections and checks, per name, that none
// overlaps the next and that fencing tokens strictly increase.
func checkSections(t *testing.T, ctx context.Context, iso *dbtest.Isolated) {
	t.Helper()
	rows, err := iso.Store().QueryContext(ctx, "SELECT name, token, begin_us, end_us, who FROM soak_sections")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	byName := map[string][]section{}
	total := 0
	for rows.Next() {
		var s section
		if err := rows.Scan(&s.name, &s.token, &s.begin, &s.end, &s.who); err != nil {
			t.Fatal(err)
		}
		byName[s.name] = append(byName[s.name], s)
		total++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d critical sections on %d names", iso.Kind, total, len(byName))
	if total < 20 {
		t.Errorf("only %d critical sections recorded: the soak exercised little", total)
	}
	for name, ss := range byName {
		sort.Slice(ss, func(i, j int) bool { return ss[i].begin < ss[j].begin })
		var last section
		for i, s := range ss {
			if s.end < s.begin {
				t.Errorf("%s: section of %s ends before it begins: %+v", name, s.who, s)
			}
			if i > 0 && last.end > s.begin {
				t.Errorf("%s: overlap: %s held [%d, %d] and %s began at %d", name, last.who, last.begin, last.end, s.who, s.begin)
			}
			last = s
		}
		var prev section
		for _, s := range ss {
			if s.token == 0 {
				continue
			}
			if prev.token != 0 && s.token <= prev.token {
				t.Errorf("%s: token %d of %s (begin %d) not above token %d of %s (begin %d)",
					name, s.token, s.who, s.begin, prev.token, prev.who, prev.begin)
			}
			prev = s
		}
	}
}
