package cmdline

import "strconv"

// Count returns n followed by the noun that agrees with it, for messages:
// Count(1, "line", "lines") is "1 line", Count(0, "line", "lines") is
// "0 lines".
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}
