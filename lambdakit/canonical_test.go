package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Payload canonicalisation (canonical.go): bodies that decode to one
// payment share a payload, whatever their spelling; bodies that decode to
// different payments never do.

// PayloadBody against encoding/json decoding into map[string]any (numbers
// compared by exact value). Random bodies mix the
// spellings the canonical form must merge (number forms, escapes, surrogate
// pairs, lone surrogates, U+FFFD, NUL) and the ones it must keep apart
// (string vs number, "true" vs true, case and fold variants of names such
// as K and the Kelvin sign, duplicate members). Two bodies with one payload
// must decode to equal values; two bodies that decode to equal values
// without case-variant names must have one payload.
func TestPayloadAgreesWithMapDecoding(t *testing.T) {
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

// Two bodies that encoding/json decodes into different payments are never
// one payload, even when they differ only in a repeated member. Decoding
// into a struct does not replace an earlier value with a later one in two
// cases: a later null leaves a string, number or struct field as it was,
// and a later object is merged into the struct the earlier one filled. So
// {"currency":"USD","currency":null} is a USD payment and
// {"currency":"EUR","currency":null} a EUR one; were their payloads equal
// (keeping only the last of a repeated member, as a map does), the second
// would replay the first's result: a EUR payment answered with a USD charge,
// and never charged. The second must fail with ErrPayloadMismatch (or, with
// PayloadFields, the first already fails on the repeated field).
func TestPayloadDuplicateMembersThatStructsDecodeDifferently(t *testing.T) {
	pairs := []struct {
		name, first, second string
	}{
		{
			"later null keeps the earlier string",
			`{"payment_id":"p1","amount":100,"currency":"USD","currency":null}`,
			`{"payment_id":"p1","amount":100,"currency":"EUR","currency":null}`,
		},
		{
			"later null keeps the earlier number",
			`{"payment_id":"p1","amount":100,"amount":null,"currency":"USD"}`,
			`{"payment_id":"p1","amount":999,"amount":null,"currency":"USD"}`,
		},
		{
			"later object is merged into the earlier one",
			`{"payment_id":"p1","amount":100,"currency":"USD","card":{"number":"4111"},"card":{}}`,
			`{"payment_id":"p1","amount":100,"currency":"USD","card":{"number":"5500"},"card":{}}`,
		},
	}
	payloads := map[string]func(*lambdakit.Options){
		"PayloadBody": func(*lambdakit.Options) {},
		"PayloadFields": func(o *lambdakit.Options) {
			o.Payload = lambdakit.PayloadFields("payment_id", "amount", "currency", "card.number")
		},
	}
	for _, p := range pairs {
		for pname, opt := range payloads {
			t.Run(pname+"/"+p.name, func(t *testing.T) {
				// The premise: encoding/json decodes the two bodies
				// into different payments.
				var a, b nestedPayment
				if json.Unmarshal([]byte(p.first), &a) != nil || json.Unmarshal([]byte(p.second), &b) != nil || a == b {
					t.Fatalf("premise: bodies decode to %+v and %+v; want two different payments", a, b)
				}
				var charged []nestedPayment
				h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.TypedResult(func(_ context.Context, v nestedPayment) (nestedPayment, error) {
					charged = append(charged, v)
					return v, nil
				}), opt)
				if _, err := handle(t, h, lambdakittest.Message(p.first)); err != nil {
					// PayloadFields refuses a field named twice: the
					// record fails, and nothing is taken for a
					// duplicate. That is safe too.
					if pname == "PayloadFields" && len(charged) == 0 {
						return
					}
					t.Fatalf("first payment: %v", err)
				}
				got, err := handle(t, h, lambdakittest.Message(p.second))
				if err == nil && len(charged) == 1 {
					t.Fatalf("second payment %+v was answered with the first one's result %s without running; want ErrPayloadMismatch", b, got)
				}
				if !errors.Is(err, lambdakit.ErrPayloadMismatch) {
					t.Errorf("second payment: got err %v; want ErrPayloadMismatch", err)
				}
			})
		}
	}
}

// The same payment re-sent by another JSON encoder is the same payload:
// escapes, spacing, key order and number spellings must not matter.
func TestIdempotentPayloadComparesValuesNotText(t *testing.T) {
	same := []struct{ name, first, again string }{
		{"escapes", `{"payment_id":"o<1>","amount":5}`, `{"payment_id":"o\u003c1\u003e","amount":5}`},
		{"key order and spacing", `{"payment_id":"p","amount":1,"currency":"EUR"}`, "{ \"currency\" : \"EUR\",\n \"amount\": 1, \"payment_id\": \"p\" }"},
		{"nested key order", `{"payment_id":"p","card":{"last4":"4242","exp":"12/30"}}`, `{"card":{"exp":"12/30","last4":"4242"},"payment_id":"p"}`},
		{"number spelling", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":1e2}`},
		{"fraction spelling", `{"payment_id":"p","rate":0.5}`, `{"payment_id":"p","rate":5.00E-1}`},
		{"escaped slash and unicode", `{"payment_id":"p","note":"a/b é"}`, `{"payment_id":"p","note":"a\/b \u00e9"}`},
	}
	for _, tc := range same {
		t.Run("same: "+tc.name, func(t *testing.T) {
			fx := &testenv.Counter{}
			h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				fx.Add("p")
				return nil, nil
			}))
			for i, body := range []string{tc.first, tc.again} {
				if _, err := handle(t, h, lambdakittest.Message(body)); err != nil {
					t.Fatalf("message %d (%s): %v", i+1, body, err)
				}
			}
			if n := fx.Count("p"); n != 1 {
				t.Errorf("handler ran %d times; want 1 (the second is a duplicate)", n)
			}
		})
	}
	different := []struct{ name, first, again string }{
		{"other amount", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":101}`},
		{"number versus string", `{"payment_id":"p","amount":100}`, `{"payment_id":"p","amount":"100"}`},
		{"extra field", `{"payment_id":"p","amount":1}`, `{"payment_id":"p","amount":1,"x":null}`},
		{"array order", `{"payment_id":"p","l":[1,2]}`, `{"payment_id":"p","l":[2,1]}`},
	}
	for _, tc := range different {
		t.Run("different: "+tc.name, func(t *testing.T) {
			h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil }))
			if _, err := handle(t, h, lambdakittest.Message(tc.first)); err != nil {
				t.Fatal(err)
			}
			if _, err := handle(t, h, lambdakittest.Message(tc.again)); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
				t.Errorf("got %v; want ErrPayloadMismatch", err)
			}
		})
	}
}

// Records keep the SHA-256 of the payload: a change to the canonical form
// would turn every retry of a message handled before a deploy into
// ErrPayloadMismatch. These hashes are what lambdakit wrote before the
// form was made in two passes; they must never change.
func TestPayloadHashesStayAsRecordsKeepThem(t *testing.T) {
	for _, tc := range []struct{ body, hash string }{
		{`{"payment_id":"p-1","amount":1250,"currency":"EUR"}`, "f21db79b79704c141bd6b7c07dcec1ef9e1007b77dcd26fbf0ba07cf5e2ca75f"},
		{`{"z":{"b":[{"y":1,"x":2},{"x":{"q":null,"p":true}}],"a":"\u00e9\/"},"a":{"d":1.25e3,"c":-0.0000015,"B":false,"b":"k"},"m":[]}`, "6433c81a6688d826873abae2670e3cc15ecc0cadf413ffc9109d123c7db143a6"},
		{`{"amount":1,"AMOUNT":2,"amount":{"x":1},"\u212a":3,"k":4,"K":{}}`, "cb539cb3e3fccf300c1f9f136e8a18a096283883963e2faa3d4c6dda6efb4f0f"},
		{`[{"b":1,"a":{"d":{},"c":[{"f":1,"e":2}]}},"s",1e40,{}]`, "250ff33c9923b32672dae68853b882390ae4fd6b7595ee4b2b9946281f8f57bb"},
		{`"just a string"`, "576c55307a050e192bae27e916976be59af1769dd8e915fcbdbb1a2047656336"},
	} {
		p, err := lambdakit.PayloadBody(&events.SQSMessage{Body: tc.body})
		if err != nil {
			t.Fatalf("PayloadBody(%s): %v", tc.body, err)
		}
		if got := lambdakit.KeyHash(p); got != tc.hash {
			t.Errorf("payload hash of %s = %s, records hold %s", tc.body, got, tc.hash)
		}
	}
}

// Anyone who can send to the queue chooses the body, and its payload is
// computed on every delivery. Objects nested 9,999 deep around one large
// string (1 MiB, SQS's largest body) must cost about what encoding/json
// takes to decode them, not once per level: the payload was 40 times
// slower than json.Unmarshal, about 0.45 s a record.
func TestPayloadOfDeeplyNestedObjectsCostsAboutADecode(t *testing.T) {
	const depth = 9999
	body := strings.Repeat(`{"a":`, depth) + `"` + strings.Repeat("x", 1<<20-6*depth-2) + `"` + strings.Repeat("}", depth)
	msg := &events.SQSMessage{Body: body}
	// The best of a few runs of each, so that a busy machine slows both.
	best := func(f func()) time.Duration {
		d := time.Duration(1<<63 - 1)
		for range 3 {
			start := time.Now()
			f()
			d = min(d, time.Since(start))
		}
		return d
	}
	decode := best(func() {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
	})
	payload := best(func() {
		if _, err := lambdakit.PayloadBody(msg); err != nil {
			t.Fatal(err)
		}
	})
	if payload > 8*decode {
		t.Errorf("PayloadBody of %d nested objects took %v, json.Unmarshal %v: over 8 times", depth, payload, decode)
	}
}
