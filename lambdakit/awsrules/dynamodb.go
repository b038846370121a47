package awsrules

import (
	"fmt"
	"strings"
)

// DynamoDB's limits, from the DynamoDB Developer Guide's "Quotas in
// Amazon DynamoDB" page. DynamoDB's KB and MB are 1,024 bytes and 1,024 KB.
const (
	// MaxItemBytes is the largest item: the UTF-8 lengths of its
	// attribute names plus the sizes of their values ("Item size").
	MaxItemBytes = 400 * 1024
	// MaxAttributeNameBytes is the longest attribute name, in UTF-8:
	// names are "less than 64 KB" ("Supported data types and naming
	// rules", Naming rules).
	MaxAttributeNameBytes = 64*1024 - 1
	// MaxTransactionItems is how many actions one TransactWriteItems
	// holds ("Transactions").
	MaxTransactionItems = 100
	// MaxTransactionBytes is the aggregate size of the items of one
	// transaction ("Transactions": 4 MB).
	MaxTransactionBytes = 4 * 1024 * 1024
	// MaxExpressionBytes is the longest expression string: a condition,
	// update, projection or filter expression ("Expression parameters").
	MaxExpressionBytes = 4 * 1024
	// MaxPartitionKeyBytes is the longest partition key value
	// ("Partition key value length").
	MaxPartitionKeyBytes = 2048
	// MaxSortKeyBytes is the longest sort key value ("Sort key value
	// length").
	MaxSortKeyBytes = 1024
	// MaxNumberDigits is how many significant digits a number holds.
	MaxNumberDigits = 38
	// Numbers' magnitudes run from 1E-130 to 9.99…(38 nines)E+125: with
	// at most 38 digits, their exponent in scientific notation is from
	// minNumberExp to maxNumberExp.
	minNumberExp = -130
	maxNumberExp = 125
)

// CheckNumber returns an error wrapping ErrNumber unless n is a number
// DynamoDB holds. The rule is the DynamoDB Developer Guide's "Supported
// data types and naming rules", section "Number": a positive, negative or
// zero decimal of up to 38 significant digits (leading and trailing zeros
// do not count), whose magnitude is from 1E-130 to
// 9.9999999999999999999999999999999999999E+125. It is written as decimal
// digits with an optional sign, point and exponent ("-12.5", "1E-130");
// hexadecimal, NaN, Infinity, blanks and underscores are not numbers.
func CheckNumber(n string) error {
	if why := checkDecimal(n, minNumberExp, maxNumberExp); why != "" {
		return fmt.Errorf("%w: %s", ErrNumber, why)
	}
	return nil
}

// checkDecimal says why n is not a decimal of at most MaxNumberDigits
// significant digits whose leading digit's power of ten is from minExp to
// maxExp, or "" when it is one (zero always is).
func checkDecimal(n string, minExp, maxExp int) string {
	digits, exp, ok := parseDecimal(n)
	if !ok {
		return fmt.Sprintf("%q is not a decimal number", n)
	}
	first, last := -1, -1 // the first and last significant digits
	for i := 0; i < len(digits); i++ {
		if digits[i] != '0' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return "" // zero, however written
	}
	if sig := last - first + 1; sig > MaxNumberDigits {
		return fmt.Sprintf("%q has %d significant digits; at most %d", clip(n), sig, MaxNumberDigits)
	}
	// exp places the decimal point after digits[:exp] (it may lie
	// outside digits); the leading digit's power of ten is then:
	switch sci := exp - 1 - first; {
	case sci > maxExp:
		return fmt.Sprintf("%q is larger in magnitude than 9.99…E+%d", clip(n), maxExp)
	case sci < minExp:
		return fmt.Sprintf("%q is smaller in magnitude than 1E%d", clip(n), minExp)
	}
	return ""
}

// CheckNumberSet returns an error wrapping ErrSet unless members are a
// number set DynamoDB holds: "Supported data types and naming rules",
// section "Sets": one or more members (empty sets are not supported),
// each unique, and each a number CheckNumber takes (the error then wraps
// ErrNumber too). Members are numbers, compared by value: "1", "1.0" and
// "+1E0" are one member, and DynamoDB refuses a set that holds two of
// them ("Input collection contains duplicates").
func CheckNumberSet(members []string) error {
	if len(members) == 0 {
		return fmt.Errorf("%w: an empty number set", ErrSet)
	}
	seen := make(map[string]string, len(members))
	for _, m := range members {
		if err := CheckNumber(m); err != nil {
			return fmt.Errorf("%w: %w", ErrSet, err)
		}
		v := numberValue(m)
		if prev, dup := seen[v]; dup {
			return fmt.Errorf("%w: %q and %q are one number", ErrSet, clip(prev), clip(m))
		}
		seen[v] = m
	}
	return nil
}

// numberValue is a number CheckNumber takes, written so that two numbers
// of one value are written the same: its sign, its significant digits,
// and the power of ten of the first; "0" for zero, however signed.
func numberValue(n string) string {
	digits, point, _ := parseDecimal(n)
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return "0"
	}
	sig := strings.TrimRight(digits[first:], "0")
	sign := ""
	if n[0] == '-' {
		sign = "-"
	}
	return fmt.Sprintf("%s%sE%d", sign, sig, point-1-first)
}

// parseDecimal reads [+-]digits[.digits][(e|E)[+-]digits], with at least
// one digit in the mantissa. It returns the mantissa's digits and where
// its decimal point falls in them once the exponent is applied (it may
// fall outside them).
func parseDecimal(n string) (digits string, point int, ok bool) {
	i := 0
	if i < len(n) && (n[i] == '+' || n[i] == '-') {
		i++
	}
	// An integer's digits are a part of n, taken as they are: most
	// numbers are integers, checked on every record.
	start := i
	for i < len(n) && '0' <= n[i] && n[i] <= '9' {
		i++
	}
	if i == len(n) || n[i] != '.' {
		digits, point = n[start:i], i-start
	} else {
		buf := make([]byte, 0, len(n))
		buf = append(buf, n[start:i]...)
		point = len(buf)
		for i++; i < len(n) && '0' <= n[i] && n[i] <= '9'; i++ {
			buf = append(buf, n[i])
		}
		digits = string(buf)
	}
	if digits == "" {
		return "", 0, false
	}
	if i == len(n) {
		return digits, point, true
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
		// Past a million the number is out of range whatever its
		// digits: stop counting, so that e cannot overflow.
		if e < 1_000_000 {
			e = e*10 + int(c-'0')
		}
	}
	return digits, point + sign*e, true
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}
