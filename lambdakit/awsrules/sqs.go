package awsrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SQS's limits, from the SQS Developer Guide's "Amazon SQS message
// quotas" page.
const (
	// MaxMessageBytes is the largest message, its body and attributes
	// together: 1 MiB since SQS raised it from 256 KiB in 2025, and the
	// most a queue's MaximumMessageSize can be set to.
	MaxMessageBytes = 1 << 20
	// MinMaxMessageBytes is the least a queue's MaximumMessageSize can be
	// set to.
	MinMaxMessageBytes = 1024
	// MaxMessageAttributes is how many attributes one message carries.
	MaxMessageAttributes = 10
	// MaxIDLength is the longest message group ID and deduplication ID.
	MaxIDLength = 128
	// MaxAttributeNameLength is the longest message attribute name.
	MaxAttributeNameLength = 256
)

// CheckGroupID returns an error wrapping ErrGroupID unless id is a
// MessageGroupId SQS takes: "Amazon SQS message quotas", "Message group
// ID": 1 to 128 characters, each an ASCII letter or digit or one of the
// punctuation marks !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ (every printable
// ASCII character but the space).
func CheckGroupID(id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("%w %q: %s", ErrGroupID, clip(id), err)
	}
	return nil
}

// CheckDeduplicationID returns an error wrapping ErrDeduplicationID unless
// id is a MessageDeduplicationId SQS takes: the rule of CheckGroupID
// (SQS API Reference, SendMessage, "MessageDeduplicationId").
func CheckDeduplicationID(id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("%w %q: %s", ErrDeduplicationID, clip(id), err)
	}
	return nil
}

// errBadID is checkID's answer; the callers name the ID.
var errBadID = fmt.Sprintf("want 1 to %d ASCII letters, digits and punctuation", MaxIDLength)

func checkID(id string) error {
	if id == "" || len(id) > MaxIDLength {
		return errors.New(errBadID)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '!' || id[i] > '~' {
			return fmt.Errorf("byte %d: %s", i, errBadID)
		}
	}
	return nil
}

// CheckAttributeName returns an error wrapping ErrAttributeName unless
// name is a message attribute name SQS takes. The rule is the SQS
// Developer Guide's "Amazon SQS message attributes", "Name": up to 256
// characters, each A-Z, a-z, 0-9, underscore, hyphen or period; not
// starting with "AWS." or "Amazon." in any case (reserved); not starting
// or ending with a period; no two periods in a row. Names are
// case-sensitive: "a" and "A" are two attributes.
func CheckAttributeName(name string) error {
	fail := func(why string) error { return fmt.Errorf("%w %q: %s", ErrAttributeName, clip(name), why) }
	switch lower := strings.ToLower(name); {
	case name == "":
		return fail("empty")
	case len(name) > MaxAttributeNameLength:
		return fail(fmt.Sprintf("%d characters; at most %d", len(name), MaxAttributeNameLength))
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fail(`names starting "AWS." or "Amazon." (in any case) are reserved`)
	case name[0] == '.' || name[len(name)-1] == '.':
		return fail("starts or ends with a period")
	case strings.Contains(name, ".."):
		return fail("holds two periods in a row")
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			return fail(fmt.Sprintf("byte %d: want letters A-Z and a-z, digits, _, - and .", i))
		}
	}
	return nil
}

// Number attributes' magnitudes run from 10^-128 to below 10^+126: their
// exponent in scientific notation is from minAttrNumberExp to
// maxAttrNumberExp.
const (
	minAttrNumberExp = -128
	maxAttrNumberExp = 125
)

// CheckNumberAttribute returns an error wrapping ErrNumberAttribute unless
// s is a value SQS takes for a Number message attribute: "Amazon SQS
// message attributes", "Message attribute data types", Number: positive,
// negative or zero, up to 38 digits of precision, between 10^-128 and
// 10^+126 in magnitude (this check takes 10^-128 itself and stops below
// 10^+126), written as CheckNumber reads a number.
func CheckNumberAttribute(s string) error {
	if why := checkDecimal(s, minAttrNumberExp, maxAttrNumberExp); why != "" {
		return fmt.Errorf("%w: %s", ErrNumberAttribute, why)
	}
	return nil
}

// CheckText returns an error wrapping ErrText, naming the offset of the
// first bad byte, unless s is UTF-8 made only of the characters SQS takes
// in a message body or a String or Number attribute value: "Amazon SQS
// message quotas", "Message content": #x9, #xA, #xD, #x20 to #xD7FF,
// #xE000 to #xFFFD and #x10000 to #x10FFFF (XML's characters).
func CheckText(s string) error {
	for off := 0; off < len(s); {
		// ASCII, most of what is sent, eight bytes at a time while none
		// is a control character or past ASCII, then a byte at a time,
		// without decoding: this runs over every message body, twice per
		// message published by an outbox.
		for off+8 <= len(s) {
			w := binary.LittleEndian.Uint64([]byte(s[off : off+8]))
			// A byte with its top bit set, or one below 0x20 (which
			// borrows into its top bit when 0x20 is taken from it).
			if (w|(w-0x2020202020202020))&0x8080808080808080 != 0 {
				break
			}
			off += 8
		}
		if off == len(s) {
			break
		}
		if c := s[off]; c < utf8.RuneSelf {
			if c < 0x20 && c != 0x9 && c != 0xA && c != 0xD {
				return fmt.Errorf("%w: byte %d is not UTF-8 or a character SQS allows", ErrText, off)
			}
			off++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[off:])
		switch {
		case r == utf8.RuneError && n == 1:
		case r == 0x9, r == 0xA, r == 0xD,
			0x20 <= r && r <= 0xD7FF,
			0xE000 <= r && r <= 0xFFFD,
			0x10000 <= r && r <= 0x10FFFF:
			off += n
			continue
		}
		return fmt.Errorf("%w: byte %d is not UTF-8 or a character SQS allows", ErrText, off)
	}
	return nil
}

// EscapeJSON returns the JSON js with each character SQS refuses in a
// message body (see CheckText) written as a JSON escape, so that a JSON
// body SQS would refuse carries the same values and is sent. It is meant
// for the output of encoding/json, which escapes control characters and
// makes its output UTF-8: what is left (U+FFFE and U+FFFF) can stand only
// inside strings, where the escape means the same character.
func EscapeJSON(js string) string {
	if CheckText(js) == nil {
		return js // the usual case: no copy
	}
	var b strings.Builder
	for _, r := range js {
		if CheckText(string(r)) != nil {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
