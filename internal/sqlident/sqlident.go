package sqlident

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/dblock-go/dblock"
)

// part is one identifier: letters, digits and underscores, not starting with
// a digit, at most 63 bytes (PostgreSQL's limit).
var part = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Quote validates ident and quotes it with q (`"`, or "`" on MySQL).
// Validation is what makes it safe; quoting keeps reserved words usable.
// With qualified, one "schema." prefix is allowed (and quoted apart).
// Errors wrap dblock.ErrInvalidOption.
func Quote(ident, q string, qualified bool) (string, error) {
	parts := []string{ident}
	if qualified {
		if schema, name, ok := strings.Cut(ident, "."); ok {
			parts = []string{schema, name}
		}
	}
	for i, p := range parts {
		if !part.MatchString(p) {
			want := "letters, digits and underscores, not starting with a digit, at most 63 bytes"
			if qualified {
				want += " (optionally schema.name)"
			}
			return "", fmt.Errorf("%w: identifier %q: want %s", dblock.ErrInvalidOption, ident, want)
		}
		parts[i] = q + p + q
	}
	return strings.Join(parts, "."), nil
}

// Valid reports whether ident is one plain identifier (see Quote), as the
// names of the library's own savepoints must be.
func Valid(ident string) bool { return part.MatchString(ident) }
