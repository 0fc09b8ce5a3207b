package apidump

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api/v1.txt with the current API")

// apiFile is the checked-in list of the module's exported API.
var apiFile = filepath.Join("..", "..", "api", "v1.txt")

// TestAPI compares the exported API of every public package with api/v1.txt:
// a change of the surface must show in review as a change of that file.
func TestAPI(t *testing.T) {
	lines, err := Module(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(apiFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatalf("read the checked-in API: %v (create it with `make api`)", err)
	}
	if added, removed := diff(string(want), got); len(added)+len(removed) > 0 {
		t.Errorf("the exported API differs from api/v1.txt:\n%s\n"+
			"If the change is intended, run `make api` (go test ./internal/apidump -run TestAPI -update), "+
			"commit api/v1.txt, and record the change in CHANGELOG.md.",
			formatDiff(added, removed))
	}
}

// TestDumpShapes checks the line formats on this package's own test fixture.
func TestDumpShapes(t *testing.T) {
	lines, err := Dir(filepath.Join("testdata", "shapes"), "shapes")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg shapes, const Answer = 42",
		"pkg shapes, func New(context.Context, string, ...Option) (*Thing, error)",
		"pkg shapes, method (*Thing) Close() error",
		"pkg shapes, type Getter interface { Get }",
		"pkg shapes, type Getter interface, Get(string) (int, bool)",
		"pkg shapes, type Option func(*Thing)",
		"pkg shapes, type Thing struct",
		"pkg shapes, type Thing struct, Name string",
		"pkg shapes, var ErrX = errors.New(\"shapes: x\")",
	}
	got := map[string]bool{}
	for _, l := range lines {
		got[l] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing line %q in:\n%s", w, strings.Join(lines, "\n"))
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "hidden") {
			t.Errorf("unexported name listed: %q", l)
		}
	}
}

func diff(want, got string) (added, removed []string) {
	w, g := set(want), set(got)
	for l := range g {
		if !w[l] {
			added = append(added, l)
		}
	}
	for l := range w {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			m[l] = true
		}
	}
	return m
}

func formatDiff(added, removed []string) string {
	var b strings.Builder
	for _, l := range sorted(removed) {
		b.WriteString("- " + l + "\n")
	}
	for _, l := range sorted(added) {
		b.WriteString("+ " + l + "\n")
	}
	return b.String()
}
