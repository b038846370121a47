// Package idtext finds a record ID in texts others wrote: a store's error
// that names the record by its stored ID, which with ReadableIDs holds
// the key. lambdakit's engine and lambdakitotel hide such an ID the same
// way, by the forms Forms lists.
package idtext

import (
	"slices"
	"strconv"
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
