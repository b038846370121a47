package idtext_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/idtext"
)

// Every way fmt writes an ID (%s, %v, %q, %+q) holds one of its forms, so
// that replacing the forms, longest first, leaves nothing of the ID.
func TestFormsCoverWhatFmtWrites(t *testing.T) {
	for _, id := range []string{"order#alice@example.com", `order#zoë "the boss" \ müller`, "order#tab\there", "order#日本"} {
		forms := idtext.Forms(id)
		if !slices.IsSortedFunc(forms, func(a, b string) int { return len(b) - len(a) }) {
			t.Errorf("Forms(%q) = %q; want the longest first", id, forms)
		}
		for _, verb := range []string{"%s", "%v", "%q", "%+q", "%#q"} {
			text := fmt.Sprintf("store: acquire "+verb+": throttled", id)
			for _, f := range forms {
				text = strings.ReplaceAll(text, f, "HIDDEN")
			}
			if !strings.Contains(text, "HIDDEN") {
				t.Errorf("%s of %q: %q; want the ID replaced", verb, id, text)
			}
			if key := strings.TrimPrefix(id, "order#"); strings.Contains(text, key) {
				t.Errorf("%s of %q: %q still holds the key", verb, id, text)
			}
		}
	}
}

// Replace hides each ID its function gives a replacement for, in every
// form, a longer ID before one that starts it, and leaves the others.
func TestReplaceHidesTheIDsItIsGiven(t *testing.T) {
	ids := []string{"order#al", "order#alice", "order#bob"}
	text := fmt.Sprintf("get order#alice and %q, then order#al, not order#bob", `order#al"`)
	got := idtext.Replace(text, append(ids, `order#al"`), func(id string) (string, bool) {
		return "<" + strings.TrimPrefix(id, "order#") + ">", id != "order#bob"
	})
	want := `get <alice> and "<al">", then <al>, not order#bob`
	if got != want {
		t.Errorf("Replace = %s; want %s", got, want)
	}
}
