// Package idtext finds record IDs in texts others wrote: a store's error
// that names a record by its stored ID, which with ReadableIDs holds the
// key. lambdakit's engine and lambdakitotel hide such IDs the same way,
// with Replace.
package idtext

import (
	"slices"
	"strconv"
	"strings"
)

// Forms returns the ways a text may write the record ID id: as it is, and
// as %q and %+q write it, without the quotes, when they escape some of its
// characters (quotes, backslashes, non-ASCII letters). Longer forms come
// first, so that replacing them in turn never leaves part of one.
func Forms(id string) []string {
	forms := []string{id}
	for _, quoted := range []string{strconv.Quote(id), strconv.QuoteToASCII(id)} {
		if inner := quoted[1 : len(quoted)-1]; !slices.Contains(forms, inner) {
			forms = append(forms, inner)
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return forms
}

// Replace is text with every form (Forms) of each ID of ids for which
// shown gives a replacement replaced by it. The longest IDs go first, so
// that no ID is replaced inside a longer one that starts with it; shown
// is asked only for IDs the text holds.
func Replace(text string, ids []string, shown func(id string) (string, bool)) string {
	if len(ids) > 1 {
		ids = slices.Clone(ids)
		slices.SortFunc(ids, func(a, b string) int { return len(b) - len(a) })
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		replacement, asked := "", false
		for _, form := range Forms(id) {
			if !strings.Contains(text, form) {
				continue
			}
			if !asked {
				var ok bool
				replacement, ok = shown(id)
				if !ok {
					break
				}
				asked = true
			}
			text = strings.ReplaceAll(text, form, replacement)
		}
	}
	return text
}
