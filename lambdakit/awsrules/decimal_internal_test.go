package awsrules

import (
	"regexp"
	"testing"
)

// FuzzParseDecimalAgreesWithTheDigitByDigitReading checks parseDecimal,
// which takes an integer's digits as a part of n, against the syntax it
// reads as a regular expression: the same digits, point and verdict for
// any text.
func FuzzParseDecimalAgreesWithTheDigitByDigitReading(f *testing.F) {
	for _, n := range []string{"0", "1250", "-1", "+7", "1.5", ".5", "5.", ".", "", "-", "1e5", "1.5E-3", "12.34.5", "1e", "1e+", "0012", "1x", "9" + "e1000000000"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n string) {
		digits, point, ok := parseDecimal(n)
		wantDigits, wantPoint, wantOK := readDecimal(n)
		if digits != wantDigits || point != wantPoint || ok != wantOK {
			t.Fatalf("parseDecimal(%q) = %q, %d, %v; want %q, %d, %v", n, digits, point, ok, wantDigits, wantPoint, wantOK)
		}
	})
}

// decimal is the syntax parseDecimal reads: a sign, the mantissa's
// integer and fraction digits, and an exponent.
var decimal = regexp.MustCompile(`^[+-]?([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?)([0-9]+))?$`)

// readDecimal is parseDecimal read off the regular expression: the
// mantissa's digits without its point, and the point moved by the
// exponent, which stops growing past a million as parseDecimal's does.
func readDecimal(n string) (digits string, point int, ok bool) {
	m := decimal.FindStringSubmatch(n)
	if m == nil || m[1]+m[2] == "" {
		return "", 0, false
	}
	e := 0
	for _, c := range m[4] {
		if e < 1_000_000 {
			e = e*10 + int(c-'0')
		}
	}
	if m[3] == "-" {
		e = -e
	}
	return m[1] + m[2], len(m[1]) + e, true
}
