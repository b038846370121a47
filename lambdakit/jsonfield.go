package lambdakit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// errNoField means the path does not lead to a value (or leads to null).
var errNoField = errors.New("field not found")

// jsonField returns the raw JSON of the value at path (field names of nested
// objects) in body, without decoding the whole document. Keys are read on
// every record, so this scans instead of unmarshalling into maps: it costs
// no allocations unless a key is escaped.
//
// body must be valid JSON; callers check that once with json.Valid.
func jsonField(body []byte, path []string) ([]byte, error) {
	v := body
	for _, name := range path {
		var err error
		if v, err = objectMember(trimSpace(v), name); err != nil {
			return nil, err
		}
	}
	v = trimSpace(v)
	if string(v) == "null" {
		return nil, errNoField
	}
	return v, nil
}

// objectMember returns the raw value of member name of the object obj. When
// the name occurs more than once the last one wins, as in encoding/json, so
// that the key names the value a decoding handler works on.
func objectMember(obj []byte, name string) ([]byte, error) {
	if len(obj) == 0 || obj[0] != '{' {
		return nil, errNoField
	}
	var found []byte
	i := 1
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			if found == nil {
				return nil, errNoField
			}
			return found, nil
		}
		keyEnd := skipString(obj, i)
		key := obj[i:keyEnd]
		i = skipSpace(obj, keyEnd)
		i = skipSpace(obj, i+1) // the colon
		valEnd := skipValue(obj, i)
		if keyEquals(key, name) {
			found = obj[i:valEnd]
		}
		i = skipSpace(obj, valEnd)
		if i < len(obj) && obj[i] == ',' {
			i++
		}
	}
}

// keyEquals compares a quoted JSON string with name. Only keys with escapes
// need decoding.
func keyEquals(quoted []byte, name string) bool {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == name
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func trimSpace(b []byte) []byte {
	return bytes.TrimRight(b[skipSpace(b, 0):], " \t\r\n")
}

// skipString returns the index after the string that starts at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) && !strings.ContainsRune(" \t\r\n,}]", rune(b[i])) {
			i++
		}
		return i
	}
}

// scalarString turns a raw JSON scalar into the string a key is made of:
// strings unquoted, numbers and booleans as written. Objects and arrays are
// not keys.
func scalarString(raw []byte) (string, error) {
	switch {
	case len(raw) == 0:
		return "", errNoField
	case raw[0] == '"':
		inner := raw[1 : len(raw)-1]
		if bytes.IndexByte(inner, '\\') < 0 {
			return string(inner), nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case raw[0] == '{' || raw[0] == '[':
		return "", errors.New("value is an object or array, not a scalar")
	default:
		return string(raw), nil
	}
}
