package lambdakit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// KeyFunc derives the idempotency key of a message. Two messages with the
// same key are the same piece of work: the second is a duplicate. A KeyFunc
// returns an error wrapping ErrNoKey when the message carries no key.
//
// Derive the key from what the producer put in the message, so that a
// producer's retry (a new SQS message with the same content) is recognised
// too. KeyFromMessageID is the one exception, for when nothing better exists.
type KeyFunc func(msg *events.SQSMessage) (string, error)

// KeyFromField returns a KeyFunc that reads the field at path in the JSON
// body: a field name, or dot-separated names for nested objects
// ("order.id"). String values are used as they are (escapes decoded);
// booleans as written; numbers by value, in one canonical spelling, so
// 1, 1.0, 1e0 and 10e-1 are the same key "1" (and 1500 and 1.5e3 the same
// key "1500"). A string and a number that read alike are one key too:
// "1" and 1.
//
// A missing, null or empty field means no key (ErrNoKey). A key that
// cannot be read safely is ErrInvalidKey: a body that is not one valid
// JSON object, a path through a value that is not an object, a value that
// is an object or an array, or a body that also carries the field's name
// in other case ("PAYMENT_ID" beside "payment_id"), which encoding/json
// would decode into a struct, so the key could name another payment than
// the handler processes.
func KeyFromField(path string) KeyFunc {
	p := splitPath(path)
	return func(msg *events.SQSMessage) (string, error) {
		return fieldString(msg, path, p)
	}
}

// KeyFromFields returns a KeyFunc that joins a fixed prefix and the values of
// several body fields with ':', as in "Order:<aggregate_id>:<message_id>".
// Every field must be present and non-empty. A ':' or '\' inside a value is
// escaped with '\', so different field values never join to the same key.
//
// It panics when given no path: every message would have the key prefix,
// and each after the first would be answered as a duplicate of it, never
// run. A misconfigured function should fail when it starts.
func KeyFromFields(prefix string, paths ...string) KeyFunc {
	if len(paths) == 0 {
		panic("lambdakit: KeyFromFields(" + strconv.Quote(prefix) + ") has no field path: every message would have one key")
	}
	split := make([][]string, len(paths))
	for i, path := range paths {
		split[i] = splitPath(path)
	}
	return func(msg *events.SQSMessage) (string, error) {
		var b strings.Builder
		b.WriteString(prefix)
		for i, p := range split {
			v, err := fieldString(msg, paths[i], p)
			if err != nil {
				return "", err
			}
			b.WriteByte(':')
			if strings.ContainsAny(v, `:\`) {
				v = strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(v)
			}
			b.WriteString(v)
		}
		return b.String(), nil
	}
}

// KeyFromBodyHash returns a KeyFunc whose key is the SHA-256 of the body:
// byte-identical bodies are duplicates. Only safe when the body carries
// nothing that differs between a producer's retries (a timestamp would).
func KeyFromBodyHash() KeyFunc {
	return func(msg *events.SQSMessage) (string, error) {
		if msg.Body == "" {
			return "", fmt.Errorf("%w: empty body", ErrNoKey)
		}
		sum := sha256.Sum256(bytesOf(msg.Body))
		return hex.EncodeToString(sum[:]), nil
	}
}

// KeyFromAttribute returns a KeyFunc that reads the string message attribute
// name (for example a producer-set "idempotency-key").
func KeyFromAttribute(name string) KeyFunc {
	return func(msg *events.SQSMessage) (string, error) {
		a, ok := msg.MessageAttributes[name]
		if !ok || a.StringValue == nil || *a.StringValue == "" {
			return "", fmt.Errorf("%w: message attribute %q missing or empty", ErrNoKey, name)
		}
		return *a.StringValue, nil
	}
}

// KeyFromMessageID returns a KeyFunc that uses the SQS message ID. The ID
// survives a redelivery of the same message, so that is caught; but a
// producer that retries a send creates a new message with a new ID, and that
// duplicate is NOT caught. Prefer a key from the message content.
func KeyFromMessageID() KeyFunc {
	return func(msg *events.SQSMessage) (string, error) {
		if msg.MessageId == "" {
			return "", fmt.Errorf("%w: empty messageId", ErrNoKey)
		}
		return msg.MessageId, nil
	}
}

// PayloadFunc returns the part of a message that must be the same for every
// message with the same key. Its SHA-256 is stored with the record, and a
// later message with the same key but different payload fails with
// ErrPayloadMismatch instead of being treated as a duplicate.
type PayloadFunc func(msg *events.SQSMessage) (string, error)

// PayloadBody is the default PayloadFunc: the whole body's JSON value, so
// that the same payment re-sent by another JSON encoder (other escapes,
// spacing, member order or number spelling) is the same payload. A body
// that is not JSON is compared byte for byte.
func PayloadBody(msg *events.SQSMessage) (string, error) {
	return payloadOf(bytesOf(msg.Body))
}

// payloadOf is what PayloadBody and Once.Do compare: b's canonical
// JSON value, or b itself, marked as raw, when it is not JSON.
func payloadOf(b []byte) (string, error) {
	canon, ok, err := canonicalJSON(b)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: payload: %w", ErrDecode, err)
	case !ok:
		return "r" + string(b), nil // 'r' never starts a canonical value
	}
	return stringOf(canon), nil
}

// PayloadFields returns a PayloadFunc over chosen body fields only, for
// bodies that carry fields which may differ between retries (timestamps,
// trace IDs). Values are compared as PayloadBody compares bodies; a
// missing field counts as null.
func PayloadFields(paths ...string) PayloadFunc {
	split := make([][]string, len(paths))
	topLevel := true
	for i, path := range paths {
		split[i] = splitPath(path)
		topLevel = topLevel && len(split[i]) == 1
	}
	return func(msg *events.SQSMessage) (string, error) {
		// Fields of the body itself, the usual case, are read in one
		// pass over it, not one pass each.
		var buf [8]lookup
		var looks []lookup
		if topLevel && len(paths) > 0 {
			looks = buf[:0]
			for _, p := range split {
				looks = append(looks, lookup{name: p[0]})
			}
			if err := members(bytesOf(msg.Body), looks); err != nil {
				return "", fmt.Errorf("%w: payload field %q: body is not a valid JSON object", ErrDecode, paths[0])
			}
		}
		// Room for the fields found and their names (escapes aside): one
		// buffer rather than one per growth, and not the body's size,
		// which may be mostly other fields.
		var out []byte
		if looks != nil {
			n := 0
			for i := range looks {
				n += len(looks[i].found) + len(looks[i].name) + len(`"":`)
			}
			out = make([]byte, 0, n)
		}
		for i, p := range split {
			var v []byte
			var err error
			if looks != nil {
				v, err = looks[i].result()
				if err == nil && string(v) == "null" {
					err = errNoField
				}
			} else {
				v, err = jsonField(bytesOf(msg.Body), p)
			}
			switch {
			case errors.Is(err, errInvalidJSON), errors.Is(err, errNotObject):
				return "", fmt.Errorf("%w: payload field %q: body is not a valid JSON object", ErrDecode, paths[i])
			case errors.Is(err, errAmbiguousField):
				return "", fmt.Errorf("%w: payload field %q is ambiguous: %v", ErrDecode, paths[i], err)
			case err != nil:
				v = []byte("null")
			}
			out = appendString(out, paths[i])
			// v is valid: the scan that found it checked the body.
			out, err = appendCanonicalValue(out, v)
			if err != nil {
				return "", fmt.Errorf("%w: payload field %q: %w", ErrDecode, paths[i], err)
			}
		}
		return stringOf(out), nil // out is this payload's alone
	}
}

func splitPath(path string) []string {
	return strings.Split(path, ".")
}

// fieldString reads the scalar at path in the body of msg as a key.
func fieldString(msg *events.SQSMessage, path string, p []string) (string, error) {
	raw, err := jsonField(bytesOf(msg.Body), p)
	switch {
	case errors.Is(err, errInvalidJSON):
		return "", fmt.Errorf("%w: body is not valid JSON", ErrInvalidKey)
	case errors.Is(err, errNotObject):
		return "", fmt.Errorf("%w: field %q: the body or a parent is not an object", ErrInvalidKey, path)
	case errors.Is(err, errAmbiguousField):
		return "", fmt.Errorf("%w: field %q is ambiguous: %v", ErrInvalidKey, path, err)
	case err != nil:
		return "", fmt.Errorf("%w: field %q missing or null", ErrNoKey, path)
	}
	s, err := scalarString(raw)
	if err != nil {
		return "", fmt.Errorf("%w: field %q: %v", ErrInvalidKey, path, err)
	}
	if s == "" {
		return "", fmt.Errorf("%w: field %q is empty", ErrNoKey, path)
	}
	return s, nil
}
