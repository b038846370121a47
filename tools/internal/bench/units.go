package bench

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Request units are computed here from what a request asks for, following
// DynamoDB's documented rules for on-demand tables; moto does not measure
// them. The rules:
//
//   - A write (PutItem, UpdateItem, DeleteItem) costs 1 write unit per
//     started KB of the item, the larger of the item before and after it;
//     a write whose condition fails costs the same.
//   - Each write of a TransactWriteItems costs twice that; a
//     ConditionCheck in it is counted like a transactional write of the
//     item it checks.
//   - A strongly consistent read costs 1 read unit per started 4 KB of
//     the item (an item that is not there costs 1), an eventually
//     consistent read half that, a transactional read twice that.
//     BatchGetItem counts each item on its own; Query and Scan round the
//     sum of the items they return.
const (
	writeUnitBytes = 1024
	readUnitBytes  = 4096
)

// writeUnits is the cost of a plain write of an item of size bytes.
func writeUnits(size int) float64 {
	return float64(max(1, (size+writeUnitBytes-1)/writeUnitBytes))
}

// readUnits is the cost of reading an item of size bytes (0: absent).
func readUnits(size int, consistent bool) float64 {
	u := float64(max(1, (size+readUnitBytes-1)/readUnitBytes))
	if !consistent {
		u /= 2
	}
	return u
}

// attrValue is an AttributeValue as DynamoDB's JSON protocol carries it.
type attrValue map[string]json.RawMessage

// item is an item, or a key, on the wire.
type item map[string]attrValue

// itemSize is the size DynamoDB bills an item at: for each attribute, the
// UTF-8 length of its name plus the size of its value.
func itemSize(it item) int {
	n := 0
	for name, v := range it {
		n += len(name) + valueSize(v)
	}
	return n
}

// valueSize is the size of one attribute value, by DynamoDB's rules:
// strings and binaries by length, numbers by significant digits (1 byte per
// two, plus 1), booleans and nulls 1 byte, lists and maps 3 bytes plus 1 per
// element plus the elements, sets the sum of their elements.
func valueSize(v attrValue) int {
	for typ, raw := range v {
		switch typ {
		case "S":
			var s string
			_ = json.Unmarshal(raw, &s)
			return len(s)
		case "N":
			var s string
			_ = json.Unmarshal(raw, &s)
			return numberSize(s)
		case "B":
			return binarySize(raw)
		case "BOOL", "NULL":
			return 1
		case "SS", "NS", "BS":
			var elems []json.RawMessage
			_ = json.Unmarshal(raw, &elems)
			n := 0
			for _, e := range elems {
				switch typ {
				case "SS":
					var s string
					_ = json.Unmarshal(e, &s)
					n += len(s)
				case "NS":
					var s string
					_ = json.Unmarshal(e, &s)
					n += numberSize(s)
				default:
					n += binarySize(e)
				}
			}
			return n
		case "L":
			var elems []attrValue
			_ = json.Unmarshal(raw, &elems)
			n := 3
			for _, e := range elems {
				n += 1 + valueSize(e)
			}
			return n
		case "M":
			var m item
			_ = json.Unmarshal(raw, &m)
			n := 3
			for name, e := range m {
				n += 1 + len(name) + valueSize(e)
			}
			return n
		}
	}
	return 0
}

// numberSize is the stored size of a number: leading and trailing zeros
// trimmed, 1 byte per two significant digits, plus 1.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.Replace(s, ".", "", 1)
	s = strings.Trim(s, "0")
	digits := utf8.RuneCountInString(s)
	return (digits+1)/2 + 1
}

func binarySize(raw json.RawMessage) int {
	var s string
	_ = json.Unmarshal(raw, &s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return len(s)
	}
	return len(b)
}
