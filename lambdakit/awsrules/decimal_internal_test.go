package awsrules

import "testing"

// FuzzParseDecimalAgreesWithTheDigitByDigitReading checks parseDecimal,
// which takes an integer's digits as a part of n, against a reading that
// copies every digit of the mantissa, skipping its point: the same digits,
// point and verdict for any text.
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

// readDecimal is parseDecimal as a digit-by-digit copy.
func readDecimal(n string) (digits string, point int, ok bool) {
	i := 0
	if i < len(n) && (n[i] == '+' || n[i] == '-') {
		i++
	}
	var buf []byte
	point = -1
	for ; i < len(n); i++ {
		c := n[i]
		if c == '.' && point < 0 {
			point = len(buf)
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		buf = append(buf, c)
	}
	if len(buf) == 0 {
		return "", 0, false
	}
	if point < 0 {
		point = len(buf)
	}
	if i == len(n) {
		return string(buf), point, true
	}
	if n[i] != 'e' && n[i] != 'E' {
		return "", 0, false
	}
	i++
	sign := 1
	if i < len(n) && (n[i] == '+' || n[i] == '-') {
		if n[i] == '-' {
			sign = -1
		}
		i++
	}
	if i == len(n) {
		return "", 0, false
	}
	e := 0
	for ; i < len(n); i++ {
		c := n[i]
		if c < '0' || c > '9' {
			return "", 0, false
		}
		if e < 1_000_000 {
			e = e*10 + int(c-'0')
		}
	}
	return string(buf), point + sign*e, true
}
