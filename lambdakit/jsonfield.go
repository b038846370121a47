package lambdakit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
)

var (
	// errNoField means the path does not lead to a value (or leads to null).
	errNoField = errors.New("field not found")
	// errInvalidJSON means the document is not one valid JSON value.
	errInvalidJSON = errors.New("not valid JSON")
	// errAmbiguousField means the object names the field more than once,
	// or has a member whose name differs from the field's only in case.
	errAmbiguousField = errors.New("the field is named more than once, or again in other case")
	// errNotObject means the path leads through a value that is not an
	// object (or null), so it cannot hold the field.
	errNotObject = errors.New("not an object")
)

// maxDepth is how deeply arrays and objects may nest, as in encoding/json.
const maxDepth = 10000

// jsonField returns the raw JSON of the value at path (field names of nested
// objects) in body. Keys are read on every record, so instead of decoding
// into maps it makes one pass that both validates the document (the same
// documents json.Valid accepts) and finds the member, without allocating.
// Like encoding/json, it takes the last of several members with one name.
//
// A member whose name equals the field's but for case is refused
// (errAmbiguousField): encoding/json decodes it into a struct field of that
// name, a map keeps it apart, so the key could name one payment while the
// handler processes another.
func jsonField(body []byte, path []string) ([]byte, error) {
	v := body
	for i, name := range path {
		if i > 0 && string(v) == "null" {
			return nil, errNoField // a null parent holds no field
		}
		var err error
		if v, err = member(v, name); err != nil {
			return nil, err
		}
	}
	if string(v) == "null" {
		return nil, errNoField
	}
	return v, nil
}

// member checks that doc is exactly one valid JSON value and returns the
// raw value of its member name, if doc is an object that has one.
func member(doc []byte, name string) ([]byte, error) {
	look := [1]lookup{{name: name}}
	if err := members(doc, look[:]); err != nil {
		return nil, err
	}
	return look[0].result()
}

// members checks that doc is exactly one valid JSON value, an object, and
// fills looks with what it holds of each one's name, in one pass.
func members(doc []byte, looks []lookup) error {
	s := scanner{b: doc}
	s.space()
	object := s.peek() == '{'
	var ok bool
	if object {
		ok = s.object(looks)
	} else {
		ok = s.value()
	}
	s.space()
	switch {
	case !ok || s.i != len(s.b):
		return errInvalidJSON
	case !object:
		return errNotObject
	}
	return nil
}

// result is the raw value look found, or why there is none.
func (look *lookup) result() ([]byte, error) {
	switch {
	case look.variant:
		return nil, errAmbiguousField
	case look.found == nil:
		return nil, errNoField
	}
	return look.found, nil
}

// lookup is what object looks for in the members of an object: the raw value
// of the member called name, and whether the object is ambiguous about it
// (the name twice, or a name that differs from it only in case).
type lookup struct {
	name    string
	found   []byte
	variant bool
}

// scanner validates JSON text (RFC 8259) from position i.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() { s.i = skipSpace(s.b, s.i) }

// skipSpace returns the index of the first byte of b from i on that is not
// JSON white space, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value scans one value and the space before it.
func (s *scanner) value() bool {
	s.space()
	switch c := s.peek(); {
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array()
	case c == '"':
		return s.str()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	default:
		return s.literal("true") || s.literal("false") || s.literal("null")
	}
}

// object scans an object, and records in each of looks what it asks.
func (s *scanner) object(looks []lookup) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	s.i++ // '{'
	s.space()
	if s.peek() == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		s.space()
		start := s.i
		if s.peek() != '"' || !s.str() {
			return false
		}
		key := s.b[start:s.i]
		s.space()
		if s.peek() != ':' {
			return false
		}
		s.i++
		s.space()
		vstart := s.i
		if !s.value() {
			return false
		}
		for l := range looks {
			look := &looks[l]
			switch exact, folded := keyMatches(key, look.name); {
			case exact:
				// encoding/json decodes a repeated member in turn into
				// a struct: a later null keeps the earlier value, a
				// later object merges into it. Which value the handler
				// sees is not the last one's alone: ambiguous.
				look.variant = look.variant || look.found != nil
				look.found = s.b[vstart:s.i]
			case folded:
				look.variant = true
			}
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

func (s *scanner) array() bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	s.i++ // '['
	s.space()
	if s.peek() == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.value() {
			return false
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// str scans a string starting at its opening quote.
func (s *scanner) str() bool {
	s.i++ // '"'
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if !isHex(s.peek()) {
						return false
					}
					s.i++
				}
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits scans one or more digits.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scanner) literal(word string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		s.i += len(word)
		return true
	}
	return false
}

// keyMatches compares a quoted JSON string with name, exactly and ignoring
// case as encoding/json does. It runs for every member on the way to a key,
// so the common case (no escapes, ASCII) allocates nothing.
func keyMatches(quoted []byte, name string) (exact, folded bool) {
	raw := quoted[1 : len(quoted)-1]
	// Most members differ from name in their first character, which,
	// when both are ASCII and not an escape, is the first rune of each:
	// names whose first runes do not fold alike cannot match.
	if len(raw) > 0 && len(name) > 0 && raw[0] != '\\' && raw[0] < utf8.RuneSelf && name[0] < utf8.RuneSelf &&
		lowerASCII(raw[0]) != lowerASCII(name[0]) {
		return false, false
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		var key string
		if json.Unmarshal(quoted, &key) != nil {
			return false, false
		}
		return key == name, key != name && strings.EqualFold(key, name)
	}
	if string(raw) == name {
		return true, false
	}
	if isASCII(raw) && isASCII([]byte(name)) {
		return false, len(raw) == len(name) && asciiEqualFold(raw, name)
	}
	// Unicode folding can match names of different lengths (K and the
	// Kelvin sign).
	return false, strings.EqualFold(string(raw), name)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	for i, c := range b {
		if lowerASCII(c) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	return c
}

// scalarString turns a raw JSON scalar into the string a key is made of:
// strings unquoted, numbers in their canonical spelling (so 1, 1.0 and 1e0
// are one key; see appendCanonicalNumber), booleans as written. Objects and
// arrays are not keys.
func scalarString(raw []byte) (string, error) {
	switch {
	case len(raw) == 0:
		return "", errNoField
	case raw[0] == '"':
		// As encoding/json decodes it: without escapes and valid
		// UTF-8, as it is; otherwise escapes resolved and invalid bytes
		// turned into U+FFFD, so that a key is what a handler sees.
		inner := raw[1 : len(raw)-1]
		if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			return string(inner), nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case raw[0] == '{' || raw[0] == '[':
		return "", errors.New("value is an object or array, not a scalar")
	case raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9':
		n, err := appendCanonicalNumber(nil, raw)
		return string(n), err
	default:
		return string(raw), nil
	}
}
