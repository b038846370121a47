// Package jmespathkey selects idempotency keys and payloads with JMESPath
// expressions as Powertools for AWS Lambda users write them, such as
// "powertools_json(body).order_id" or
// "powertools_json(body).[customer_id, order_id]", so that a team moving a
// function from Powertools keeps its expressions.
//
// It is a package of its own so that a function that keys by field paths
// (lambdakit.KeyFromField) does not link a JMESPath interpreter.
//
// The expression is evaluated on the SQS record in the Lambda event's JSON
// form (messageId, body, attributes, messageAttributes, ...), as Powertools
// evaluates it on a record of a batch: the body is a string there, so a key
// inside it needs powertools_json(body). Powertools' functions
// powertools_json, powertools_base64 and powertools_base64_gzip are
// registered beside JMESPath's own.
//
// # One record, one key
//
// A key and a payload are a pure function of the record's bytes. JMESPath
// leaves the order of an object's members to the implementation where it
// enumerates them (the value projection ".*", keys(), values(), items());
// this package gives them in name order, by bytes as encoding/json sorts
// them, so that a redelivered record gets the key it had. (Powertools for
// Python gives them in the JSON text's order; lambdakit's keys are not
// Powertools' anyway: lambdakit hashes them with SHA-256, Powertools with
// MD5.)
//
// # What one message may cost
//
// The expression is yours but the record is whoever sent it, and keying
// runs again on every delivery, before the handler can refuse anything. So
// the work one record can cause is bounded, on the order of what decoding
// a 1 MiB JSON body with encoding/json costs:
//
//   - powertools_base64_gzip inflates at most MaxGunzipBytes;
//   - powertools_json decodes at most MaxJSONValues values for one record,
//     all its calls together (a small gzip body can inflate to millions of
//     tiny values, each of which costs more than the byte it came from);
//   - the functions build at most MaxFunctionBytes for one record, all their
//     calls together, and pad_left, pad_right, replace, join and split are
//     refused before they run when what they would build is past what is
//     left (a width or a replacement taken from the record could otherwise
//     ask for gigabytes).
//
// A record past a bound is refused with ErrTooCostly, wrapped in
// lambdakit.ErrInvalidKey by KeyFromJMESPath and in lambdakit.ErrDecode by
// PayloadFromJMESPath: the record is the same on every delivery, so the
// batch treats it as poison rather than retrying it. Expressions that
// refer to the record again inside itself ($, let and its variables, which
// Powertools' JMESPath does not have) are refused when compiled: a
// projection over them repeats the whole record once per element.
package jmespathkey

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/aws/aws-lambda-go/events"
	jmespath "github.com/jmespath-community/go-jmespath"
	jpfunctions "github.com/jmespath-community/go-jmespath/pkg/functions"
	"github.com/jmespath-community/go-jmespath/pkg/interpreter"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// ErrExpression is returned by KeyFromJMESPath and PayloadFromJMESPath for
// an expression that does not compile, calls an unknown function, or
// refers back to the record with $ or let.
var ErrExpression = errors.New("jmespathkey: invalid expression")

// ErrTooCostly is the error of a record whose key or payload would cost
// more than the bounds the package documents.
var ErrTooCostly = errors.New("jmespathkey: the record costs too much to evaluate the expression on")

const (
	// MaxGunzipBytes bounds what powertools_base64_gzip inflates, so that
	// a small message cannot expand into gigabytes in the function's
	// memory.
	MaxGunzipBytes = 4 << 20

	// MaxJSONValues bounds the values (objects, arrays, members' values,
	// elements, scalars) powertools_json decodes for one record. It is
	// what the densest body SQS can carry holds: every value takes at
	// least 2 bytes with its comma, so 1 MiB holds at most 2^19 ("[0,0,
	// ...,0]"), and no body a queue accepts is refused. 4 MiB of "0,"
	// inflated from a 5 KB gzip body holds 2 million, which took 1.2 s
	// to decode; it stops at the quarter.
	MaxJSONValues = 1 << 19

	// MaxFunctionBytes bounds what the expression's functions build for
	// one record: a string counts its bytes, a list or an object 16 bytes
	// for each element or member. It leaves room for a body inflated to
	// MaxGunzipBytes and as much again for the functions applied to it.
	MaxFunctionBytes = 2 * MaxGunzipBytes

	// elementBytes is what a list's element or an object's member is
	// counted for: the interface value that holds it.
	elementBytes = 16
)

// maxDepth bounds the nesting powertools_json decodes, as encoding/json does.
const maxDepth = 10000

// KeyFromJMESPath compiles expr once and returns a KeyFunc that evaluates it
// on the record. A string result is the key as it is; any other result (a
// number, a boolean, a list such as "[customer_id, order_id]", an object)
// is keyed as a whole by its JSON text from encoding/json: object members
// sorted by name, numbers in their shortest spelling, so 1 and 1.0 are the
// key "1", as is the string "1".
//
// A result that is null, "", an empty object, or a list that is empty or
// all nulls is no key: lambdakit.ErrNoKey, as Powertools counts a missing
// key. (Powertools then runs the handler without idempotency unless
// raise_on_no_idempotency_key is set; lambdakit fails closed unless
// Options.ProcessWithoutKey is set.) A record the expression cannot be
// evaluated on (powertools_json over text that is not JSON, a function
// given the wrong type) is lambdakit.ErrInvalidKey.
func KeyFromJMESPath(expr string) (lambdakit.KeyFunc, error) {
	ast, err := compile(expr)
	if err != nil {
		return nil, err
	}
	return func(msg *events.SQSMessage) (string, error) {
		v, err := search(ast, msg)
		if err != nil {
			return "", fmt.Errorf("%w: %q: %w", lambdakit.ErrInvalidKey, expr, err)
		}
		if missing(v) {
			return "", fmt.Errorf("%w: %q selects nothing", lambdakit.ErrNoKey, expr)
		}
		if s, ok := v.(string); ok {
			return s, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("%w: %q: %w", lambdakit.ErrInvalidKey, expr, err)
		}
		return string(b), nil
	}, nil
}

// PayloadFromJMESPath compiles expr once and returns a PayloadFunc whose
// payload is the JSON text of expr's result on the record, as
// KeyFromJMESPath spells a non-string key (a null result is "null"), as
// Powertools' payload_validation_jmespath selects it. A record the
// expression cannot be evaluated on is lambdakit.ErrDecode.
func PayloadFromJMESPath(expr string) (lambdakit.PayloadFunc, error) {
	ast, err := compile(expr)
	if err != nil {
		return nil, err
	}
	return func(msg *events.SQSMessage) (string, error) {
		v, err := search(ast, msg)
		if err == nil {
			var b []byte
			if b, err = json.Marshal(v); err == nil {
				return string(b), nil
			}
		}
		return "", fmt.Errorf("%w: payload %q: %w", lambdakit.ErrDecode, expr, err)
	}, nil
}

// functions are Powertools' functions. powertools_json's handler only
// checks its argument's type, as the interpreter does for every function;
// the meter decodes the text, within the record's bound.
var functions = []jmespath.FunctionEntry{
	stringFunction("powertools_json", func(s string) (any, error) { return jsonText(s), nil }),
	stringFunction("powertools_base64", func(s string) (any, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	}),
	stringFunction("powertools_base64_gzip", powertoolsBase64Gzip),
}

// jsonText is powertools_json's argument on its way to the meter.
type jsonText string

func stringFunction(name string, f func(string) (any, error)) jmespath.FunctionEntry {
	return jmespath.FunctionEntry{
		Name:      name,
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			return f(args[0].(string))
		},
	}
}

// sortedObjectFunctions replace JMESPath's keys, values and items, which
// range over the Go map that holds the object, in a random order: the same
// record gave another key on its redelivery. The caller keeps the last
// entry of a name. (merge, from_items and group_by range over maps too,
// but what they build does not depend on the order.)
var sortedObjectFunctions = []jmespath.FunctionEntry{
	objectFunction("keys", func(_ map[string]any, name string) any { return name }),
	objectFunction("values", memberValue),
	objectFunction("items", func(obj map[string]any, name string) any { return []any{name, obj[name]} }),
}

func objectFunction(name string, member func(obj map[string]any, name string) any) jmespath.FunctionEntry {
	return jmespath.FunctionEntry{
		Name:      name,
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpObject}}},
		Handler: func(args []any) (any, error) {
			return members(args[0].(map[string]any), member), nil
		},
	}
}

// members lists member(obj, name) for each of obj's members in name order.
func members(obj map[string]any, member func(obj map[string]any, name string) any) []any {
	out := make([]any, 0, len(obj))
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		out = append(out, member(obj, name))
	}
	return out
}

func memberValue(obj map[string]any, name string) any { return obj[name] }

var allFunctions = slices.Concat(jpfunctions.GetDefaultFunctions(), functions, sortedObjectFunctions)

// caller runs every function, JMESPath's and Powertools'; a meter of each
// evaluation calls it.
var caller = interpreter.NewFunctionCaller(allFunctions...)

// compile parses expr and checks every function it calls exists, so that a
// misspelt name fails at start, not on the first message. An expression
// the parser panics on, rather than refusing it (go-jmespath v1.1.1 does
// on a character outside ASCII in an unquoted identifier, "a\u0080"), is
// refused as invalid too.
func compile(expr string) (ast parsing.ASTNode, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %q: the parser failed on it: %v", ErrExpression, expr, p)
		}
	}()
	ast, err = parsing.NewParser().Parse(expr)
	if err != nil {
		return ast, fmt.Errorf("%w: %q: %w", ErrExpression, expr, err)
	}
	if err := refused(ast); err != nil {
		return ast, fmt.Errorf("%w: %q: %s", ErrExpression, expr, err)
	}
	return sortValueProjections(ast), nil
}

// sortedValuesFunc is the function a value projection is rewritten to
// call. No expression can call it: compile refuses a name no function has
// before it rewrites.
const sortedValuesFunc = "values of a value projection"

// sortValueProjections rewrites every value projection L.*R in n into a
// projection of R over the values of L's members in name order: the
// interpreter's own ranges over the Go map that holds L, in a random
// order. L is passed by reference, and evaluated by sortedValuesFunc, so
// that an error of L's is null, as the interpreter makes it there.
func sortValueProjections(n parsing.ASTNode) parsing.ASTNode {
	children := make([]parsing.ASTNode, len(n.Children))
	for i, c := range n.Children {
		children[i] = sortValueProjections(c)
	}
	n.Children = children
	if n.NodeType != parsing.ASTValueProjection {
		return n
	}
	values := parsing.ASTNode{
		NodeType: parsing.ASTFunctionExpression,
		Value:    sortedValuesFunc,
		Children: []parsing.ASTNode{
			{NodeType: parsing.ASTExpRef, Children: children[:1]},
			{NodeType: parsing.ASTCurrentNode},
		},
	}
	return parsing.ASTNode{NodeType: parsing.ASTProjection, Children: []parsing.ASTNode{values, children[1]}}
}

// sortedValues is sortedValuesFunc: the values of the members of the
// object its reference gives on the current node, in name order; null if
// that fails or is no object, as the interpreter's value projection has it.
func sortedValues(args []any) any {
	left, current := args[0].(jmespath.ExpRef), args[1]
	v, err := left(current)
	obj, ok := v.(map[string]any)
	if err != nil || !ok {
		return nil
	}
	return members(obj, memberValue)
}

// known names every function an expression may call.
var known = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range allFunctions {
		m[f.Name] = true
	}
	return m
}()

// refused names what compile refuses in n: a function that does not
// exist, or a reference back to the record ($, let and its variables),
// which would let a projection repeat the whole record once per element
// and make the key's JSON text the square of the record's size.
func refused(n parsing.ASTNode) error {
	switch n.NodeType {
	case parsing.ASTFunctionExpression:
		if name, _ := n.Value.(string); !known[name] {
			return fmt.Errorf("unknown function %s()", name)
		}
	case parsing.ASTRootNode, parsing.ASTLetExpression, parsing.ASTVariable:
		return errors.New("$ and let are not supported: they refer to the record again inside the expression")
	}
	for _, c := range n.Children {
		if err := refused(c); err != nil {
			return err
		}
	}
	return nil
}

func search(ast parsing.ASTNode, msg *events.SQSMessage) (v any, err error) {
	// A record the interpreter panics on cannot be evaluated either:
	// an error the caller names, rather than a panic of the batch's.
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("the expression's evaluation failed: %v", p)
		}
	}()
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var record any
	if err := json.Unmarshal(b, &record); err != nil {
		return nil, err
	}
	m := &meter{}
	v, err = interpreter.NewInterpreter(record, m, nil).Execute(ast, record)
	if m.tooCostly != nil {
		// The interpreter drops errors on the left of a filter, a
		// flatten or a value projection; a record past a bound is
		// refused wherever it was found.
		return nil, m.tooCostly
	}
	return v, err
}

// meter calls the functions of one evaluation and keeps what they cost
// within MaxJSONValues and MaxFunctionBytes.
type meter struct {
	values    int   // decoded by powertools_json
	built     int   // bytes the functions built, as MaxFunctionBytes counts them
	tooCostly error // the first ErrTooCostly, kept since the interpreter may drop it
}

// CallFunction implements interpreter.FunctionCaller.
func (m *meter) CallFunction(name string, args []any) (any, error) {
	if name == sortedValuesFunc {
		// Not counted: the interpreter's value projection did not
		// count the values it ranged over either.
		return sortedValues(args), nil
	}
	v, err := m.call(name, args)
	if errors.Is(err, ErrTooCostly) && m.tooCostly == nil {
		m.tooCostly = err
	}
	return v, err
}

func (m *meter) call(name string, args []any) (any, error) {
	if n := predicted(name, args); n > MaxFunctionBytes-m.built {
		return nil, fmt.Errorf("%w: %s() would build %d bytes, over what is left of %d", ErrTooCostly, name, n, MaxFunctionBytes)
	}
	v, err := caller.CallFunction(name, args)
	if err != nil {
		return nil, err
	}
	if s, ok := v.(jsonText); ok {
		return m.powertoolsJSON(string(s))
	}
	switch v := v.(type) {
	case string:
		m.built += len(v)
	case []any:
		m.built += elementBytes * len(v)
	case map[string]any:
		m.built += elementBytes * len(v)
	}
	if m.built > MaxFunctionBytes {
		return nil, fmt.Errorf("%w: the functions built more than %d bytes", ErrTooCostly, MaxFunctionBytes)
	}
	return v, nil
}

// predicted is what the functions whose output the record can make
// arbitrarily larger than their input would build, computed from their
// arguments before they run; 0 for every other function, whose output is
// at most a small multiple of what it was given, and is counted after.
// Arguments of the wrong type count 0: the function refuses them.
func predicted(name string, args []any) int {
	arg := func(i int) any {
		if i < len(args) {
			return args[i]
		}
		return nil
	}
	str := func(i int) string {
		s, _ := arg(i).(string)
		return s
	}
	// count is a width or count argument, at most one past the bound so
	// that sums cannot overflow; -1 if absent or not a number.
	count := func(i int) int {
		f, ok := arg(i).(float64)
		if !ok {
			return -1
		}
		return int(min(max(f, 0), MaxFunctionBytes+1))
	}
	switch name {
	case "pad_left", "pad_right":
		return max(count(1), len(str(0)))
	case "replace":
		s, old, repl := str(0), str(1), str(2)
		if len(repl) <= len(old) {
			return 0
		}
		n := strings.Count(s, old)
		if c := count(3); c >= 0 {
			n = min(n, c)
		}
		return len(s) + n*(len(repl)-len(old))
	case "join":
		list, _ := arg(1).([]any)
		n := len(str(0)) * len(list)
		for _, e := range list {
			s, _ := e.(string)
			n += len(s)
		}
		return n
	case "split":
		n := strings.Count(str(0), str(1)) + 1
		if c := count(2); c >= 0 {
			n = min(n, c+1)
		}
		return elementBytes * n
	}
	return 0
}

// missing reports whether v is no key, as Powertools decides it.
func missing(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case map[string]any:
		return len(v) == 0
	case []any:
		for _, e := range v {
			if e != nil {
				return false
			}
		}
		return true
	}
	return false
}

var (
	errNotJSON       = errors.New("powertools_json: not one JSON value")
	errAmbiguous     = errors.New("powertools_json: a member named twice, or again in other case")
	errInexact       = errors.New("powertools_json: a number float64 cannot hold exactly")
	errTooDeep       = errors.New("powertools_json: nested too deep")
	errGunzipTooBig  = fmt.Errorf("%w: powertools_base64_gzip: more than %d bytes inflated", ErrTooCostly, MaxGunzipBytes)
	errTooManyValues = fmt.Errorf("%w: powertools_json: more than %d values decoded", ErrTooCostly, MaxJSONValues)
)

// powertoolsJSON decodes s as JMESPath sees JSON (numbers as float64). It
// refuses what could make the key name other work than the handler does:
// a member named twice or again in other case (encoding/json decodes every
// repeat into a struct field, matching names without regard to case), and
// a number that float64 would round into another (an ID beyond 2^53).
// It stops at the record's MaxJSONValues-th value.
func (m *meter) powertoolsJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	v, err := m.decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotJSON
	}
	return v, nil
}

func (m *meter) decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	if m.values++; m.values > MaxJSONValues {
		return nil, errTooManyValues
	}
	t, err := dec.Token()
	if err != nil {
		return nil, errNotJSON
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			arr := []any{}
			for dec.More() {
				e, err := m.decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, e)
			}
			_, err = dec.Token()
			return arr, err
		case '{':
			obj := map[string]any{}
			folded := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, errNotJSON
				}
				name := k.(string)
				f := fold(name)
				if folded[f] {
					return nil, errAmbiguous
				}
				folded[f] = true
				if obj[name], err = m.decodeValue(dec, depth+1); err != nil {
					return nil, err
				}
			}
			_, err = dec.Token()
			return obj, err
		}
		return nil, errNotJSON
	case json.Number:
		return exactFloat(string(t))
	}
	return t, nil // string, bool or nil
}

// exactFloat returns n as float64 when every other decimal float64 would
// hold as a distinct value is another float64: at most 15 significant
// digits, in float64's normal range. Anything else is refused.
func exactFloat(n string) (any, error) {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return nil, errInexact
	}
	digits := significantDigits(n)
	if digits > 15 || (f == 0) != (digits == 0) || (f != 0 && abs(f) < 0x1p-1022) {
		return nil, errInexact
	}
	return f, nil
}

// significantDigits counts the digits of a JSON number's mantissa from its
// first one that is not 0 to its last. It runs on every number of a body,
// so it allocates nothing: a strings.Replacer built per number made a body
// of 2M numbers (4 MiB inflated by powertools_base64_gzip from 6 KB) take
// seconds.
func significantDigits(n string) int {
	if e := strings.IndexAny(n, "eE"); e >= 0 {
		n = n[:e]
	}
	first, last, i := -1, -1, 0
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			continue
		}
		if c != '0' {
			if first < 0 {
				first = i
			}
			last = i
		}
		i++
	}
	if first < 0 {
		return 0
	}
	return last - first + 1
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// fold maps a name to one spelling per class of names strings.EqualFold
// holds equal: each rune becomes the least rune of its case orbit.
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

func powertoolsBase64Gzip(s string) (any, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, MaxGunzipBytes+1))
	switch {
	case err != nil:
		return nil, err
	case len(out) > MaxGunzipBytes:
		return nil, errGunzipTooBig
	}
	return string(out), nil
}
