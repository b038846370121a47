package lambdakit_test

import (
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Review attack, held: PayloadBody against encoding/json decoding into
// map[string]any (numbers compared by exact value). Random bodies mix the
// spellings the canonical form must merge (number forms, escapes, surrogate
// pairs, lone surrogates, U+FFFD, NUL) and the ones it must keep apart
// (string vs number, "true" vs true, case and fold variants of names such
// as K and the Kelvin sign, duplicate members). Two bodies with one payload
// must decode to equal values; two bodies that decode to equal values
// without case-variant names must have one payload.
func TestReviewPayloadAgreesWithMapDecoding(t *testing.T) {
	numbers := []string{"0", "-0", "0e5", "0.0", "1", "1.0", "10e-1", "1e0", "0.1E1", "100", "1e2", "1E+2", "0.5", "5e-1",
		"-1", "-1.0", "1e40", "10000000000000000000000000000000000000000", "1e39", "1000000000000000000000000000000000000000",
		"1e-7", "0.0000001", "1e-6", "0.000001", "12.25", "1225e-2", "123456789012345678901234567890123456789012", "1.5e300"}
	strs := []string{`"a"`, `"\u0061"`, `"A"`, `"é"`, `"\u00e9"`, `"e\u0301"`, `"\ud800"`, `"\udc00"`, `"\ufffd"`, `"�"`,
		`"\ud83d\ude00"`, `"😀"`, `""`, `"\u0000"`, `"1"`, `"true"`, `"null"`, `"\/"`, `"/"`, `"a\u0000b"`, `"ab"`}
	folded := []string{`"a"`, `"A"`, `"\u0041"`, `"b"`, `"k"`, `"\u212a"`, `"K"`, `"s"`, `"\u017f"`, `"ab"`, `"aB"`}
	plain := []string{`"a"`, `"\u0061"`, `"b"`, `"ab"`, `"\u00e9"`, `"é"`, `"k"`}
	gen := func(r *rand.Rand, names []string) string {
		var val func(d int) string
		val = func(d int) string {
			k := r.IntN(7)
			if d > 2 {
				k = r.IntN(4)
			}
			switch k {
			case 0, 3:
				return numbers[r.IntN(len(numbers))]
			case 1:
				return strs[r.IntN(len(strs))]
			case 2:
				return []string{"true", "false", "null"}[r.IntN(3)]
			case 4, 5:
				var parts []string
				for range r.IntN(4) {
					parts = append(parts, names[r.IntN(len(names))]+":"+val(d+1))
				}
				return "{" + strings.Join(parts, ",") + "}"
			default:
				var parts []string
				for range r.IntN(3) {
					parts = append(parts, val(d+1))
				}
				return "[" + strings.Join(parts, ",") + "]"
			}
		}
		return val(0)
	}
	var norm func(v any) any
	norm = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			q, ok := new(big.Rat).SetString(string(x))
			if !ok {
				t.Fatalf("cannot read number %s", x)
			}
			return "number " + q.RatString()
		case map[string]any:
			m := make(map[string]any, len(x))
			for k, e := range x {
				m[k] = norm(e)
			}
			return m
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = norm(e)
			}
			return out
		}
		return v
	}
	decode := func(body string) any {
		d := json.NewDecoder(strings.NewReader(body))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("generated body %s: %v", body, err)
		}
		return norm(v)
	}
	payload := func(body string) string {
		msg := lambdakittest.Message(body)
		p, err := lambdakit.PayloadBody(&msg)
		if err != nil {
			t.Fatalf("PayloadBody(%s): %v", body, err)
		}
		return p
	}
	r := rand.New(rand.NewPCG(2026, 11))
	for _, c := range []struct {
		names   []string
		reverse bool // equal values must have one payload
	}{{folded, false}, {plain, true}} {
		byPayload := map[string]string{}
		byValue := map[string]string{}
		for range 5000 {
			body := gen(r, c.names)
			p := payload(body)
			if other, ok := byPayload[p]; ok && !reflect.DeepEqual(decode(other), decode(body)) {
				t.Errorf("one payload for different values: %s and %s", other, body)
			}
			byPayload[p] = body
			// A body that repeats a member name is kept apart from one
			// that does not, though a map decodes them alike: a struct
			// decodes each repeat in turn (see canonical.go).
			if !c.reverse || repeatsNames(t, body) {
				continue
			}
			key, _ := json.Marshal(decode(body))
			if other, ok := byValue[string(key)]; ok && payload(other) != p {
				t.Errorf("equal values, different payloads: %s and %s", other, body)
			}
			byValue[string(key)] = body
		}
	}
}

// repeatsNames reports whether an object in body names a member twice,
// after decoding escapes.
func repeatsNames(t *testing.T, body string) bool {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(body))
	type frame struct {
		object bool
		names  map[string]bool
		expect bool // the next token of an object is a name
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			if name, ok := tok.(string); ok {
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, names: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a name next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expect = true
		}
	}
}
