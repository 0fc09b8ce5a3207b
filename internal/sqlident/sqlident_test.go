package sqlident

import (
	"errors"
	"testing"

	"github.com/dblock-go/dblock"
)

func TestQuote(t *testing.T) {
	good := map[string]string{"accounts": `"accounts"`, "s.t": `"s"."t"`, "_x9": `"_x9"`}
	for in, want := range good {
		if got, err := Quote(in, `"`, true); err != nil || got != want {
			t.Errorf("Quote(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, _ := Quote("t", "`", false); got != "`t`" {
		t.Errorf("MySQL quote: %q", got)
	}
	for _, bad := range []string{"", "9a", "a b", `a"b`, "a;drop", "s.t", "a.b.c"} {
		if _, err := Quote(bad, `"`, bad == "a.b.c"); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("Quote(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}
