package eventfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
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
	// patterns holds each pattern as its alternatives.
	patterns [][][]condition
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
		alts, err := alternatives(obj, "")
		if err != nil {
			err.(*PatternError).Pattern = p
			return nil, err
		}
		f.patterns = append(f.patterns, alts)
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
	// A record is flattened once for each way a pattern reads its payloads.
	flat := map[string]*matcher{}
	for _, p := range f.patterns {
		for _, conds := range p {
			json := payloadsAsJSON(record, conds)
			key := fmt.Sprint(json)
			m, ok := flat[key]
			if !ok {
				fl := &flattener{leaves: map[string][]leaf{}, json: json}
				fl.walk(record, "", nil)
				if fl.notObject {
					// A pattern on a payload's fields drops a payload that is
					// not a JSON object.
					fl.leaves = nil
				}
				m = &matcher{leaves: fl.leaves, failed: map[string]bool{}}
				flat[key] = m
			}
			clear(m.failed) // what failed is known for one list of conditions
			if m.leaves != nil && m.match(conds, nil) {
				return true
			}
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
			kinds := map[string]bool{}
			for _, v := range list {
				switch v.(type) {
				case string:
					kinds["string"] = true
				case json.Number:
					kinds["number"] = true
				default:
					return &PatternError{Reason: "anything-but is implemented for strings and numbers only", Err: ErrUnsupported}
				}
			}
			if len(kinds) > 1 {
				// JsonRuleCompiler refuses a list of both.
				return &PatternError{Reason: "anything-but takes strings or numbers, not both", Err: ErrInvalid}
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

// maxAlternatives bounds how many lists of conditions a pattern's "$or"s
// expand to: each "$or" multiplies them, and a 4096-character pattern
// could otherwise ask for more than any machine holds.
const maxAlternatives = 1024

// condition is one field of a pattern as event-ruler compiles it: the
// path to a leaf of the record (the names on the way joined by dots) and
// the rules, one of which a leaf at that path must match.
type condition struct {
	path  string
	rules []any
}

// alternatives returns the pattern obj, whose fields are under prefix, as
// lists of conditions sorted by path, any one list of which must hold:
// one list, unless "$or" makes more (event-ruler's JsonRuleCompiler turns
// each choice of an "$or" into a rule of its own).
func alternatives(obj map[string]any, prefix string) ([][]condition, error) {
	alts := [][]condition{nil}
	for k, v := range obj {
		var sub [][]condition
		switch v := v.(type) {
		case map[string]any:
			nested, err := alternatives(v, prefix+k+".")
			if err != nil {
				return nil, err
			}
			sub = nested
		case []any:
			if k != "$or" {
				sub = [][]condition{{{path: prefix + k, rules: v}}}
				break
			}
			for _, o := range v {
				nested, err := alternatives(o.(map[string]any), prefix)
				if err != nil {
					return nil, err
				}
				sub = append(sub, nested...)
			}
		}
		if len(alts)*len(sub) > maxAlternatives {
			return nil, &PatternError{Reason: fmt.Sprintf(`its "$or"s make more than %d alternatives`, maxAlternatives), Err: ErrUnsupported}
		}
		var product [][]condition
		for _, a := range alts {
			for _, b := range sub {
				product = append(product, append(slices.Clip(a), b...))
			}
		}
		alts = product
	}
	for _, a := range alts {
		slices.SortStableFunc(a, func(x, y condition) int { return strings.Compare(x.path, y.path) })
	}
	return alts, nil
}

// leaf is one value of a record that is not an object or an array, with
// the element it is in of each array on its path (keyed by the array's
// number in the record), as event-ruler's Event flattens an event.
type leaf struct {
	value any
	in    map[int]int
}

// flattener flattens a record into its leaves by path. A Payload whose
// path is in json is decoded as a JSON object, else it is a string leaf.
type flattener struct {
	leaves map[string][]leaf
	arrays int
	json   map[string]bool
	// notObject is set if a payload in json is not a JSON object.
	notObject bool
}

func (fl *flattener) walk(v any, path string, in map[int]int) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if path != "" {
				k = path + "." + k
			}
			fl.walk(e, k, in)
		}
	case []any:
		// An array is crushed into its parent: its elements are values of
		// the array's path. Only objects and arrays in it record their
		// element, as in event-ruler's Event.traverseArray.
		id := fl.arrays
		fl.arrays++
		for i, e := range v {
			switch e.(type) {
			case map[string]any, []any:
				within := maps.Clone(in)
				if within == nil {
					within = map[int]int{}
				}
				within[id] = i
				fl.walk(e, path, within)
			default:
				fl.walk(e, path, in)
			}
		}
	case Payload:
		if !fl.json[path] {
			fl.leaves[path] = append(fl.leaves[path], leaf{string(v), in})
			return
		}
		decoded, err := decode([]byte(v))
		obj, ok := decoded.(map[string]any)
		if err != nil || !ok {
			fl.notObject = true
			return
		}
		fl.walk(obj, path, in)
	default:
		fl.leaves[path] = append(fl.leaves[path], leaf{v, in})
	}
}

// payloadsAsJSON returns the top-level keys of record that hold a Payload
// which conds reach into (a path under the key): those the pattern wants
// as a JSON object.
func payloadsAsJSON(record map[string]any, conds []condition) map[string]bool {
	var json map[string]bool
	for k, v := range record {
		if _, ok := v.(Payload); !ok {
			continue
		}
		for _, c := range conds {
			if strings.HasPrefix(c.path, k+".") {
				if json == nil {
					json = map[string]bool{}
				}
				json[k] = true
			}
		}
	}
	return json
}

// matcher matches lists of conditions with the leaves of one record.
type matcher struct {
	leaves map[string][]leaf
	// failed holds the searches known to fail: conditions left and the
	// array elements chosen so far.
	failed map[string]bool
}

// match reports whether conds, in order, can each be met by a leaf
// consistent with the array elements in chosen so far and with the leaves
// met before it: every leaf of a match in an array's element must be in
// the same one (event-ruler's array consistency, ArrayMembership and
// ACFinder).
func (m *matcher) match(conds []condition, in map[int]int) bool {
	if len(conds) == 0 {
		return true
	}
	key := fmt.Sprint(len(conds), in)
	if m.failed[key] {
		return false
	}
	c, rest := conds[0], conds[1:]
	for _, r := range c.rules {
		// exists false: no leaf at the path that could join this match
		// (NameState.getNameTransitions), so a field that is an object or
		// an empty array does not exist either.
		if obj, ok := r.(map[string]any); ok && obj["exists"] == false && !m.anyConsistent(c.path, in) && m.match(rest, in) {
			return true
		}
	}
	for _, l := range m.leaves[c.path] {
		joined, ok := consistent(in, l.in)
		if !ok || !slices.ContainsFunc(c.rules, func(r any) bool { return matchValue(r, l.value) }) {
			continue
		}
		if m.match(rest, joined) {
			return true
		}
	}
	m.failed[key] = true
	return false
}

// anyConsistent reports whether a leaf at path can join in.
func (m *matcher) anyConsistent(path string, in map[int]int) bool {
	for _, l := range m.leaves[path] {
		if _, ok := consistent(in, l.in); ok {
			return true
		}
	}
	return false
}

// consistent returns the array elements of in and of a leaf's, if no
// array has a different element in each.
func consistent(in, leafIn map[int]int) (map[int]int, bool) {
	var joined map[int]int
	for id, i := range leafIn {
		j, ok := in[id]
		if ok && i != j {
			return nil, false
		}
		if !ok {
			if joined == nil {
				joined = maps.Clone(in)
				if joined == nil {
					joined = map[int]int{}
				}
			}
			joined[id] = i
		}
	}
	if joined == nil {
		return in, true
	}
	return joined, true
}

// matchValue matches a rule with one leaf of the record.
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
		// As a number, or as the same text for a number no float64 holds
		// (JsonRuleCompiler adds both matches).
		return equalNumbers(r, v) || v == r
	}
	for op, arg := range r.(map[string]any) {
		s, isString := v.(string)
		switch op {
		case "exists":
			return arg == true
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

// anythingBut matches a value that is none of arg's: any leaf, null and
// booleans too (event-ruler's ByteMachine matches an anything-but on every
// value it does not list).
func anythingBut(arg, v any) bool {
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
