package eventfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Lambda's limits on FilterCriteria.
const (
	// MaxFilters is the most filters a mapping takes: Lambda's default
	// quota is 5, which AWS raises to 10 on request.
	MaxFilters = 10
	// MaxPatternLength is the longest pattern, in characters.
	MaxPatternLength = 4096
)

// Errors a PatternError is.
var (
	// ErrInvalid means the pattern breaks Lambda's syntax: Lambda refuses
	// it too.
	ErrInvalid = errors.New("eventfilter: invalid pattern")
	// ErrUnsupported means the pattern uses a rule this package does not
	// implement.
	ErrUnsupported = errors.New("eventfilter: unsupported pattern")
)

// PatternError says why a pattern was refused; errors.Is reports it as
// ErrInvalid or ErrUnsupported.
type PatternError struct {
	// Pattern is the pattern as given.
	Pattern string
	// Reason says what is wrong with it.
	Reason string
	// Err is ErrInvalid or ErrUnsupported.
	Err error
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Reason, e.Pattern)
}

func (e *PatternError) Unwrap() error { return e.Err }

// Payload is a record's payload as a string: an SQS message's body or a
// Kinesis record's data, decoded from base64. See the package comment.
type Payload string

// Filter is a mapping's FilterCriteria. The zero Filter and a nil *Filter
// have no pattern, and let every record through.
type Filter struct {
	patterns []map[string]any
}

// New returns the Filter of patterns, each a JSON object as a Filter's
// Pattern in FilterCriteria. It refuses, with a *PatternError, a pattern
// that is not valid or that uses a rule it does not implement.
func New(patterns ...string) (*Filter, error) {
	if len(patterns) > MaxFilters {
		return nil, &PatternError{Pattern: strings.Join(patterns, " "), Reason: fmt.Sprintf("%d filters; Lambda takes at most %d", len(patterns), MaxFilters), Err: ErrInvalid}
	}
	f := &Filter{}
	for _, p := range patterns {
		if len(p) > MaxPatternLength {
			return nil, &PatternError{Pattern: p, Reason: fmt.Sprintf("%d characters; Lambda takes at most %d", len(p), MaxPatternLength), Err: ErrInvalid}
		}
		v, err := decode([]byte(p))
		obj, ok := v.(map[string]any)
		if err != nil || !ok {
			return nil, &PatternError{Pattern: p, Reason: "not a JSON object", Err: ErrInvalid}
		}
		if err := checkObject(obj); err != nil {
			err.Pattern = p
			return nil, err
		}
		f.patterns = append(f.patterns, obj)
	}
	return f, nil
}

// ParseCriteria returns the patterns of FilterCriteria as JSON, in the
// shape of the Lambda API and the template: {"Filters":[{"Pattern":"..."}]}.
func ParseCriteria(criteria string) ([]string, error) {
	var c struct {
		Filters []struct {
			Pattern *string
		}
	}
	dec := json.NewDecoder(strings.NewReader(criteria))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, &PatternError{Pattern: criteria, Reason: `FilterCriteria: want {"Filters":[{"Pattern":"..."}]}: ` + err.Error(), Err: ErrInvalid}
	}
	var patterns []string
	for _, f := range c.Filters {
		if f.Pattern == nil {
			return nil, &PatternError{Pattern: criteria, Reason: "a filter without a Pattern", Err: ErrInvalid}
		}
		patterns = append(patterns, *f.Pattern)
	}
	return patterns, nil
}

// Len is how many patterns f has.
func (f *Filter) Len() int {
	if f == nil {
		return 0
	}
	return len(f.patterns)
}

// Match reports whether record passes f: f has no pattern, or one of its
// patterns matches. The record is a JSON value as Decode returns it
// (numbers as json.Number), with Payload values where the record has a
// payload.
func (f *Filter) Match(record map[string]any) bool {
	if f.Len() == 0 {
		return true
	}
	for _, p := range f.patterns {
		if matchObject(p, record) {
			return true
		}
	}
	return false
}

// Record returns v (a record as the function gets it) as Match takes it:
// encoded to JSON and decoded again, with payload at the top-level key
// payloadKey unless payloadKey is empty.
func Record(v any, payloadKey string, payload []byte) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	decoded, err := decode(b)
	rec, ok := decoded.(map[string]any)
	if err != nil || !ok {
		return nil, fmt.Errorf("eventfilter: the record is not a JSON object: %s", b)
	}
	if payloadKey != "" {
		rec[payloadKey] = Payload(payload)
	}
	return rec, nil
}

// decode decodes one JSON value, numbers as json.Number.
func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("eventfilter: more than one JSON value")
	}
	return v, nil
}

// checkObject checks a pattern (or a part of one) against the syntax.
func checkObject(obj map[string]any) *PatternError {
	if len(obj) == 0 {
		return &PatternError{Reason: "an empty object", Err: ErrInvalid}
	}
	for k, v := range obj {
		if k == "$or" {
			alts, ok := v.([]any)
			if !ok || len(alts) < 2 {
				return &PatternError{Reason: `"$or" takes a list of at least two patterns`, Err: ErrInvalid}
			}
			for _, a := range alts {
				o, ok := a.(map[string]any)
				if !ok {
					return &PatternError{Reason: `"$or" takes a list of at least two patterns`, Err: ErrInvalid}
				}
				if err := checkObject(o); err != nil {
					return err
				}
			}
			continue
		}
		switch v := v.(type) {
		case map[string]any:
			if err := checkObject(v); err != nil {
				return err
			}
		case []any:
			if len(v) == 0 {
				return &PatternError{Reason: fmt.Sprintf("%q: an empty list of rules (null is [null])", k), Err: ErrUnsupported}
			}
			for _, r := range v {
				if err := checkRule(r); err != nil {
					err.Reason = fmt.Sprintf("%q: %s", k, err.Reason)
					return err
				}
			}
		default:
			return &PatternError{Reason: fmt.Sprintf("%q: a field takes a list of rules or an object, not %v", k, v), Err: ErrInvalid}
		}
	}
	return nil
}

// checkRule checks one rule of a field's list.
func checkRule(r any) *PatternError {
	obj, ok := r.(map[string]any)
	if !ok {
		if _, nested := r.([]any); nested {
			return &PatternError{Reason: "a list inside a list of rules", Err: ErrInvalid}
		}
		return nil // a string, number, boolean or null
	}
	if len(obj) != 1 {
		return &PatternError{Reason: "a rule object takes exactly one operator", Err: ErrInvalid}
	}
	for op, arg := range obj {
		switch op {
		case "prefix", "suffix", "equals-ignore-case":
			if _, ok := arg.(string); !ok {
				return &PatternError{Reason: fmt.Sprintf("%s takes a string (its forms with an object are not implemented)", op), Err: ErrUnsupported}
			}
		case "exists":
			if _, ok := arg.(bool); !ok {
				return &PatternError{Reason: "exists takes true or false", Err: ErrInvalid}
			}
		case "anything-but":
			list, isList := arg.([]any)
			if !isList {
				list = []any{arg}
			}
			if len(list) == 0 {
				return &PatternError{Reason: "anything-but takes a value or a list of values", Err: ErrInvalid}
			}
			for _, v := range list {
				switch v.(type) {
				case string, json.Number:
				default:
					return &PatternError{Reason: "anything-but is implemented for strings and numbers only", Err: ErrUnsupported}
				}
			}
		case "numeric":
			if _, err := numericBounds(arg); err != nil {
				return &PatternError{Reason: "numeric: " + err.Error(), Err: ErrInvalid}
			}
		default:
			return &PatternError{Reason: fmt.Sprintf("the %s operator is not implemented", op), Err: ErrUnsupported}
		}
	}
	return nil
}

// bound is one comparison of a numeric rule.
type bound struct {
	op string
	n  float64
}

// numericBounds reads a numeric rule's list: ["=", n], or one or two
// bounds, a lower (> or >=) before an upper (< or <=).
func numericBounds(arg any) ([]bound, error) {
	list, ok := arg.([]any)
	if !ok || (len(list) != 2 && len(list) != 4) {
		return nil, errors.New(`want ["op", number] or ["op", number, "op", number]`)
	}
	var bs []bound
	for i := 0; i < len(list); i += 2 {
		op, _ := list[i].(string)
		num, ok := list[i+1].(json.Number)
		if !ok {
			return nil, fmt.Errorf("%v is not a number", list[i+1])
		}
		n, err := num.Float64()
		if err != nil {
			return nil, err
		}
		switch op {
		case "=", "<", "<=", ">", ">=":
		default:
			return nil, fmt.Errorf("%q is not one of =, <, <=, >, >=", list[i])
		}
		bs = append(bs, bound{op, n})
	}
	if len(bs) == 2 && (!strings.HasPrefix(bs[0].op, ">") || !strings.HasPrefix(bs[1].op, "<")) {
		return nil, errors.New("a range is a lower bound (> or >=) then an upper bound (< or <=)")
	}
	if len(bs) == 2 && bs[0].n > bs[1].n {
		return nil, errors.New("the lower bound is above the upper bound")
	}
	return bs, nil
}

// matchObject reports whether the event object matches the pattern
// object: every field, and every "$or", matches.
func matchObject(pattern, event map[string]any) bool {
	for k, p := range pattern {
		if k == "$or" {
			if !matchAny(p.([]any), event) {
				return false
			}
			continue
		}
		v, present := event[k]
		if !matchField(p, v, present) {
			return false
		}
	}
	return true
}

// matchAny reports whether one of the patterns alts matches event.
func matchAny(alts []any, event map[string]any) bool {
	for _, a := range alts {
		if matchObject(a.(map[string]any), event) {
			return true
		}
	}
	return false
}

// matchField matches one field of the pattern, p, with the event's value
// v (present reports whether the event has the field).
func matchField(p, v any, present bool) bool {
	if nested, ok := p.(map[string]any); ok {
		return matchNested(nested, v, present)
	}
	rules := p.([]any)
	if s, ok := v.(Payload); ok {
		v = string(s)
	}
	for _, r := range rules {
		if matchRule(r, v, present) {
			return true
		}
	}
	return false
}

// matchNested matches a nested pattern with the event's value: an object,
// a payload that is a JSON object, or an array one of whose elements
// matches.
func matchNested(p map[string]any, v any, present bool) bool {
	if !present {
		// Only rules that ask for absence can match a missing object.
		return matchObject(p, map[string]any{})
	}
	switch v := v.(type) {
	case map[string]any:
		return matchObject(p, v)
	case Payload:
		decoded, err := decode([]byte(v))
		obj, ok := decoded.(map[string]any)
		return err == nil && ok && matchObject(p, obj)
	case []any:
		for _, e := range v {
			if o, ok := e.(map[string]any); ok && matchObject(p, o) {
				return true
			}
		}
	}
	return false
}

// matchRule matches one rule with the event's value.
func matchRule(r, v any, present bool) bool {
	if obj, ok := r.(map[string]any); ok {
		if e, ok := obj["exists"]; ok {
			return e.(bool) == present
		}
	}
	if !present {
		return false
	}
	if list, ok := v.([]any); ok {
		for _, e := range list {
			if matchValue(r, e) {
				return true
			}
		}
		return false
	}
	return matchValue(r, v)
}

// matchValue matches a rule, not exists, with one value of the event.
func matchValue(r, v any) bool {
	switch r := r.(type) {
	case nil:
		return v == nil
	case bool:
		b, ok := v.(bool)
		return ok && b == r
	case string:
		s, ok := v.(string)
		return ok && s == r
	case json.Number:
		return equalNumbers(r, v)
	}
	for op, arg := range r.(map[string]any) {
		s, isString := v.(string)
		switch op {
		case "prefix":
			return isString && strings.HasPrefix(s, arg.(string))
		case "suffix":
			return isString && strings.HasSuffix(s, arg.(string))
		case "equals-ignore-case":
			return isString && strings.EqualFold(s, arg.(string))
		case "anything-but":
			return anythingBut(arg, v)
		case "numeric":
			return numeric(arg, v)
		}
	}
	return false
}

// anythingBut matches a string or a number that is none of arg's values.
func anythingBut(arg, v any) bool {
	switch v.(type) {
	case string, json.Number:
	default:
		return false
	}
	list, ok := arg.([]any)
	if !ok {
		list = []any{arg}
	}
	for _, x := range list {
		if x == v || equalNumbers(x, v) {
			return false
		}
	}
	return true
}

// numeric matches a number within a numeric rule's bounds.
func numeric(arg, v any) bool {
	n, ok := number(v)
	if !ok {
		return false
	}
	bs, _ := numericBounds(arg) // checked by New
	for _, b := range bs {
		var in bool
		switch b.op {
		case "=":
			in = n == b.n
		case "<":
			in = n < b.n
		case "<=":
			in = n <= b.n
		case ">":
			in = n > b.n
		case ">=":
			in = n >= b.n
		}
		if !in {
			return false
		}
	}
	return true
}

// equalNumbers reports whether a and b are both numbers, and equal.
func equalNumbers(a, b any) bool {
	x, ok1 := number(a)
	y, ok2 := number(b)
	return ok1 && ok2 && x == y
}

// number returns v as a float64 if it is a JSON number.
func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return f, err == nil && !math.IsInf(f, 0)
}
