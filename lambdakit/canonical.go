package lambdakit

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Payload validation compares JSON values, not JSON text: the same payment
// re-sent by another encoder (other escapes, spacing, key order, number
// spelling) must hash the same, or its retry would fail with
// ErrPayloadMismatch and end in the dead-letter queue.
//
// appendCanonical writes a value in a form made only for hashing: one
// spelling per value, self-delimiting, so that distinct values never share
// it.
//
//	null, true, false   'n', 't', 'f'
//	number              'd', its canonical decimal (canonicalNumber), ';'
//	string              's', uvarint byte length, the decoded UTF-8 bytes
//	array               '[', the elements, ']'
//	object              '{', per member: the name as a string, the value; '}'
//
// Strings are decoded as encoding/json decodes them (escapes resolved,
// invalid UTF-8 and lone surrogates become U+FFFD), so text that decodes to
// one Go string is one value. Object members are ordered by name, folded as
// encoding/json matches names to struct fields, then by position, and all
// of them are kept. Members whose names fold alike keep their order because
// a struct decodes them in turn: {"amount":1,"AMOUNT":2} and
// {"AMOUNT":2,"amount":1} are different payments to a handler, and so are
// {"currency":"USD","currency":null} and {"currency":"EUR","currency":null}
// (a later null leaves a struct field as it was; a later object is merged
// into the earlier one). The price is that a body repeating a member is
// never a duplicate of one that does not, though a map would decode them
// alike: a payment refused as a mismatch is safe, one taken for another's
// duplicate is not.

var errNumberRange = errors.New("number's exponent is out of range")

// canonicalizer parses one JSON value; b must be valid JSON (the scanner in
// jsonfield.go checks that first). It makes two passes: plan orders the
// members of every object, then value writes the form, each object's
// members in that order. A value without an object needs only the second. Writing each value once, where it belongs, keeps
// the cost linear: ordering an object by moving what was written of it
// would copy a body of objects nested n deep n times.
type canonicalizer struct {
	b   []byte
	i   int
	out []byte
	// members is scratch space shared by nested objects while plan
	// orders them: each object orders its own members at the end of it,
	// then truncates it.
	members []objMember
	// objects holds every object by where it opens, in that order, and
	// ordered its members, each object's in a run of its own.
	objects []objPlan
	ordered []objMember
}

// canonicalJSON returns the canonical form of body, or ok=false when body
// is not one valid JSON value.
func canonicalJSON(body []byte) (canon []byte, ok bool, err error) {
	return appendCanonicalJSON(make([]byte, 0, 2*len(body)+16), body)
}

// appendCanonicalJSON appends the canonical form of body to dst, and
// returns dst unchanged with ok=false when body is not one valid JSON value.
func appendCanonicalJSON(dst, body []byte) (out []byte, ok bool, err error) {
	s := scanner{b: body}
	if !s.value() {
		return dst, false, nil
	}
	s.space()
	if s.i != len(body) {
		return dst, false, nil
	}
	out, err = appendCanonicalValue(dst, body)
	return out, true, err
}

// appendCanonicalValue appends the canonical form of v, which must be one
// valid JSON value: checked by the scanner already, as the fields
// PayloadFields reads are when it finds them.
func appendCanonicalValue(dst, v []byte) ([]byte, error) {
	c := canonicalizer{b: v, out: dst}
	// Without a '{' (one inside a string only costs the plan) there is
	// no object to order: one pass writes the form.
	if bytes.IndexByte(v, '{') >= 0 {
		// One allocation holds a small body's scratch; a larger
		// body's grows out of it.
		s := new(struct {
			objects          [8]objPlan
			members, ordered [16]objMember
		})
		c.objects, c.members, c.ordered = s.objects[:0], s.members[:0], s.ordered[:0]
		c.plan()
		c.i = 0
	}
	if err := c.value(); err != nil {
		return dst, err
	}
	return c.out, nil
}

func (c *canonicalizer) space() { c.i = skipSpace(c.b, c.i) }

func (c *canonicalizer) value() error {
	c.space()
	switch ch := c.b[c.i]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		c.i++
		c.out = append(c.out, '[')
		c.space()
		if c.b[c.i] == ']' {
			c.i++
			c.out = append(c.out, ']')
			return nil
		}
		for {
			if err := c.value(); err != nil {
				return err
			}
			c.space()
			ch := c.b[c.i]
			c.i++
			if ch == ']' {
				c.out = append(c.out, ']')
				return nil
			}
		}
	case ch == '"':
		c.out = appendString(c.out, c.str())
	case ch == 'n':
		c.i += 4
		c.out = append(c.out, 'n')
	case ch == 't':
		c.i += 4
		c.out = append(c.out, 't')
	case ch == 'f':
		c.i += 5
		c.out = append(c.out, 'f')
	default:
		start := c.i
		c.number()
		c.out = append(c.out, 'd')
		var err error
		if c.out, err = appendCanonicalNumber(c.out, c.b[start:c.i]); err != nil {
			return err
		}
		c.out = append(c.out, ';')
	}
	return nil
}

// objMember is one object member while its object is being ordered: its
// decoded name, its position, and where its value starts in b.
type objMember struct {
	name  []byte
	pos   int
	value int
}

// objPlan is one object of b: where it opens and ends, and its members'
// run in ordered.
type objPlan struct {
	at, end     int
	first, last int
}

// plan scans one value and orders the members of the objects in it.
func (c *canonicalizer) plan() {
	c.space()
	switch ch := c.b[c.i]; {
	case ch == '{':
		c.planObject()
	case ch == '[':
		c.i++
		c.space()
		if c.b[c.i] == ']' {
			c.i++
			return
		}
		for {
			c.plan()
			c.space()
			ch := c.b[c.i]
			c.i++
			if ch == ']' {
				return
			}
		}
	case ch == '"':
		c.skipStr()
	case ch == 'n', ch == 't':
		c.i += 4
	case ch == 'f':
		c.i += 5
	default:
		c.number()
	}
}

func (c *canonicalizer) planObject() {
	k := len(c.objects)
	c.objects = append(c.objects, objPlan{at: c.i})
	c.i++ // '{'
	c.space()
	first := len(c.members)
	if c.b[c.i] == '}' {
		c.i++
	} else {
		for pos := 0; ; pos++ {
			c.space()
			name := c.str()
			c.space()
			c.i++ // ':'
			c.space()
			c.members = append(c.members, objMember{name: name, pos: pos, value: c.i})
			c.plan()
			c.space()
			ch := c.b[c.i]
			c.i++
			if ch == '}' {
				break
			}
		}
	}
	members := c.members[first:]
	slices.SortFunc(members, func(a, b objMember) int {
		if d := compareFolded(a.name, b.name); d != 0 {
			return d
		}
		return cmp.Compare(a.pos, b.pos)
	})
	p := &c.objects[k]
	p.end = c.i
	p.first = len(c.ordered)
	c.ordered = append(c.ordered, members...)
	p.last = len(c.ordered)
	c.members = c.members[:first]
}

// object writes the object at i, its members in the order plan gave them.
func (c *canonicalizer) object() error {
	k, _ := slices.BinarySearchFunc(c.objects, c.i, func(p objPlan, at int) int { return cmp.Compare(p.at, at) })
	p := c.objects[k]
	c.out = append(c.out, '{')
	for _, m := range c.ordered[p.first:p.last] {
		c.out = appendString(c.out, m.name)
		c.i = m.value
		if err := c.value(); err != nil {
			return err
		}
	}
	c.out = append(c.out, '}')
	c.i = p.end
	return nil
}

// skipStr passes over a string token, escapes and all.
func (c *canonicalizer) skipStr() {
	c.i++ // '"'
	for c.b[c.i] != '"' {
		if c.b[c.i] == '\\' {
			c.i++
		}
		c.i++
	}
	c.i++
}

// str reads a string token and returns its value as encoding/json decodes
// it: without a copy when the token has no escapes and is valid UTF-8.
func (c *canonicalizer) str() []byte {
	start := c.i
	c.i++
	plain := true
	for {
		ch := c.b[c.i]
		if ch == '"' {
			break
		}
		if ch == '\\' {
			plain = false
			c.i++
		} else if ch >= utf8.RuneSelf {
			plain = false
		}
		c.i++
	}
	c.i++
	raw := c.b[start:c.i]
	inner := raw[1 : len(raw)-1]
	if plain || utf8.Valid(inner) && bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid: the scanner checked it
	return []byte(s)
}

func (c *canonicalizer) number() {
	for c.i < len(c.b) {
		switch ch := c.b[c.i]; {
		case '0' <= ch && ch <= '9', ch == '-', ch == '+', ch == '.', ch == 'e', ch == 'E':
			c.i++
		default:
			return
		}
	}
}

func appendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, 's')
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// compareFolded orders names as if folded to one case the way
// strings.EqualFold matches them: names that EqualFold compares equal
// compare 0.
func compareFolded(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if d := cmp.Compare(foldRune(ra), foldRune(rb)); d != 0 {
			return d
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// foldRune returns one representative for all the runes EqualFold takes
// for r: an ASCII letter's lower case when the orbit has one (so that the
// Kelvin sign folds with k, and the long s with s), else the orbit's
// smallest rune.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return foldRune(f)
		}
		least = min(least, f)
	}
	return least
}

// appendCanonicalNumber appends the one spelling of the value of the JSON
// number raw: 1, 1.0, 1e0 and 10e-1 are all "1". The value is kept exactly
// (no rounding to float64): digits without leading or trailing zeros, and
//
//   - an integer of up to 40 digits as an integer ("1500", "-7");
//   - a number with a fraction and at most 6 zeros after the point as a
//     plain decimal ("0.5", "12.25", "0.0000015");
//   - anything else in scientific notation ("1.5e40", "2e-9").
//
// Zero is "0", whatever its sign. An exponent beyond a billion is refused.
func appendCanonicalNumber(dst, raw []byte) ([]byte, error) {
	neg := raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	// Split into the digits and the exponent of the last digit.
	var digits []byte
	var frac int
	i := 0
	for i < len(raw) && '0' <= raw[i] && raw[i] <= '9' {
		i++
	}
	intPart := raw[:i]
	var fracPart []byte
	if i < len(raw) && raw[i] == '.' {
		j := i + 1
		for j < len(raw) && '0' <= raw[j] && raw[j] <= '9' {
			j++
		}
		fracPart = raw[i+1 : j]
		i = j
	}
	var exp int64
	if i < len(raw) { // 'e' or 'E'
		e, err := parseExponent(raw[i+1:])
		if err != nil {
			return dst, err
		}
		exp = e
	}
	var buf [64]byte // numbers are short; a longer one spills to the heap
	digits = append(append(buf[:0], intPart...), fracPart...)
	frac = len(fracPart)
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return append(dst, '0'), nil
	}
	exp -= int64(frac)
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	// value = digits × 10^exp; point is where the decimal point falls
	// counted from the first digit.
	point := int64(len(digits)) + exp
	if neg {
		dst = append(dst, '-')
	}
	switch {
	case exp >= 0 && point <= 40:
		dst = append(dst, digits...)
		for range exp {
			dst = append(dst, '0')
		}
	case exp < 0 && point > 0:
		dst = append(dst, digits[:point]...)
		dst = append(dst, '.')
		dst = append(dst, digits[point:]...)
	case exp < 0 && point > -6:
		dst = append(dst, '0', '.')
		for range -point {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if len(digits) > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, point-1, 10)
	}
	return dst, nil
}

// parseExponent reads [+-]digits, refusing magnitudes over a billion,
// which no real payload carries and whose arithmetic could overflow.
func parseExponent(b []byte) (int64, error) {
	neg := false
	switch b[0] {
	case '-':
		neg = true
		b = b[1:]
	case '+':
		b = b[1:]
	}
	for len(b) > 1 && b[0] == '0' {
		b = b[1:]
	}
	if len(b) > 10 {
		return 0, errNumberRange
	}
	n, _ := strconv.ParseInt(string(b), 10, 64)
	if n > 1e9 {
		return 0, errNumberRange
	}
	if neg {
		n = -n
	}
	return n, nil
}
