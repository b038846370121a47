package testenv

import (
	"crypto/rand"
	"strings"
	"testing"
)

// Name returns a name for a table, queue or the like that no other test
// sharing the server uses: tb's name cut down to the characters AWS allows
// everywhere ([A-Za-z0-9_-]), plus a random suffix. It is at most 75
// characters long, so that even with a ".fifo" suffix it fits the tightest
// limit among the names it is used for: 80, for SQS queues.
func Name(tb testing.TB) string {
	tb.Helper()
	base := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
			return r
		}
		return '-'
	}, tb.Name())
	suffix := "-" + strings.ToLower(rand.Text()[:10])
	if max := 80 - len(".fifo") - len(suffix); len(base) > max {
		// The end of a subtest's name tells it apart from its siblings.
		base = base[len(base)-max:]
	}
	return base + suffix
}
