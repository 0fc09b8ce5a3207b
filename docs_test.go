package dblock_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// notCompiled marks, on the line before a ```go block of a Markdown file, a
// block that is deliberately not code an example runs (a fragment, a
// signature); say why after the colon.
const notCompiled = "<!-- not-compiled:"

// snippet is a block of Go code in the documentation.
type snippet struct {
	where string   // file:line of its first line
	lines []string // normalized (see normalize)
}

// TestDocsCompile: every Go code block of README.md and of the packages'
// doc comments (a comment block indented by a tab) stands, line for line,
// in a _test.go file of the module, where it is compiled and, from an
// Example, run. So the documentation's code cannot drift from the API.
func TestDocsCompile(t *testing.T) {
	corpus := testSources(t)
	snippets := append(markdownSnippets(t, "README.md"), docCommentSnippets(t)...)
	if len(snippets) < 2 {
		t.Fatalf("found %d snippets: the extraction is broken", len(snippets))
	}
	for _, s := range snippets {
		if !strings.Contains(corpus, strings.Join(s.lines, "\n")) {
			t.Errorf("%s: the code block starting %q is in no _test.go file.\n"+
				"Put it, line for line (indentation aside), into an Example (or a function an Example calls) "+
				"of the package it documents, so that it compiles and runs; or mark a deliberate fragment in "+
				"Markdown with %q on the line before it.", s.where, s.lines[0], notCompiled+" why -->")
		}
	}
}

// normalize folds the white space of every line (gofmt aligns comments)
// and drops the empty lines.
func normalize(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// testSources returns every _test.go file of the module, normalized and joined.
func testSources(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.WriteString(strings.Join(normalize(strings.Split(string(data), "\n")), "\n"))
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// markdownSnippets returns the ```go blocks of a Markdown file not marked
// notCompiled.
func markdownSnippets(t *testing.T, path string) []snippet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out      []snippet
		cur      *snippet
		prev     string
		n, start int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go" && !strings.HasPrefix(strings.TrimSpace(prev), notCompiled):
			cur, start = &snippet{}, n+1
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.where, cur.lines = path+":"+itoa(start), normalize(cur.lines)
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// docCommentSnippets returns the code blocks (lines starting "//\t") of the
// doc.go files of the module's packages that look like Go (they contain
// ":=" or a call); SQL and shell blocks are left to the reader.
func docCommentSnippets(t *testing.T) []snippet {
	t.Helper()
	paths, err := filepath.Glob("*/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "doc.go")
	var out []snippet
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cur []string
		start := 0
		flush := func() {
			if s := normalize(cur); len(s) > 0 && strings.Contains(strings.Join(s, "\n"), ":=") {
				out = append(out, snippet{where: path + ":" + itoa(start), lines: s})
			}
			cur = nil
		}
		for i, line := range strings.Split(string(data), "\n") {
			if code, ok := strings.CutPrefix(line, "//\t"); ok {
				if cur == nil {
					start = i + 1
				}
				cur = append(cur, code)
				continue
			}
			flush()
		}
		flush()
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }
