package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// keyOf runs fn on a standard-queue message with body.
func keyOf(tb testing.TB, fn lambdakit.KeyFunc, body string) (string, error) {
	tb.Helper()
	msg := lambdakittest.Message(body)
	return fn(&msg)
}

// wantKey checks that fn finds key in body.
func wantKey(tb testing.TB, fn lambdakit.KeyFunc, body, want string) {
	tb.Helper()
	got, err := keyOf(tb, fn, body)
	if err != nil || got != want {
		tb.Errorf("key of %s: got %q, %v; want %q, nil", body, got, err, want)
	}
}

// wantNoKey checks that fn reports ErrNoKey for body.
func wantNoKey(tb testing.TB, fn lambdakit.KeyFunc, body string) {
	tb.Helper()
	got, err := keyOf(tb, fn, body)
	if !errors.Is(err, lambdakit.ErrNoKey) || got != "" {
		tb.Errorf("key of %s: got %q, %v; want \"\", ErrNoKey", body, got, err)
	}
}

func TestKeyFromFieldFindsScalars(t *testing.T) {
	cases := []struct {
		name, path, body, want string
	}{
		{"top-level string", "payment_id", `{"payment_id":"p-1","amount":10}`, "p-1"},
		{"last field", "amount", `{"payment_id":"p-1","amount":10}`, "10"},
		{"nested field", "order.id", `{"order":{"id":"o-7","lines":[1,2]},"id":"outer"}`, "o-7"},
		{"deeply nested", "a.b.c", `{"a":{"x":{"c":"no"},"b":{"c":"yes"}}}`, "yes"},
		{"integer as written", "n", `{"n":42}`, "42"},
		{"negative float with exponent by value", "n", `{"n":-1.50e+3}`, "-1500"},
		{"fraction by value", "n", `{"n":2.50}`, "2.5"},
		{"small fraction by value", "n", `{"n":25e-8}`, "2.5e-7"},
		{"zero with sign and exponent", "n", `{"n":-0.0e5}`, "0"},
		{"big number not rounded", "n", `{"n":12345678901234567890123}`, "12345678901234567890123"},
		{"true", "b", `{"b":true}`, "true"},
		{"false", "b", `{"b":false}`, "false"},
		{"escaped key name", "payment_id", `{"pay\u006dent_id":"x"}`, "x"},
		{"escaped quote in key name", `a"b`, `{"a\"b":"q"}`, "q"},
		{"escaped string value decoded", "id", `{"id":"a\"b\\c\u00e9\n"}`, "a\"b\\c\u00e9\n"},
		{"unicode value as is", "id", `{"id":"zahlung-ü-€"}`, "zahlung-ü-€"},
		{"whitespace everywhere", "order.id", " \n\t{ \"order\" \r\n : \t { \"id\" :  \"w\"  } , \"x\" : 1 }\n ", "w"},
		{"whitespace around number", "n", "{\"n\" :\n 7 \n}", "7"},
		{
			"after nested objects and arrays with tricky strings",
			"id",
			`{"meta":{"note":"} ] { [ \" \\","list":[{"s":"]}"},"\"id\":\"fake\"",[[]],{}]},"arr":["id","{\"id\":1}"],"id":"real"}`,
			"real",
		},
		{"closing brace inside a nested string", "id", `{"x":{"s":"}","id":"fake"},"id":"real"}`, "real"},
		{"closing bracket inside a string in an array", "id", `{"x":["]","id",{"id":"fake"}],"id":"real"}`, "real"},
		{"same name nested earlier is not the top-level field", "id", `{"x":{"id":"inner"},"id":"outer"}`, "outer"},
		{"prefix of a longer key does not match", "id", `{"idx":"no","id":"yes"}`, "yes"},
		{"empty object before", "id", `{"e":{},"a":[],"id":"z"}`, "z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantKey(t, lambdakit.KeyFromField(tc.path), tc.body, tc.want)
		})
	}
}

func TestKeyFromFieldReportsNoKey(t *testing.T) {
	cases := []struct {
		name, path, body string
	}{
		{"missing", "payment_id", `{"amount":10}`},
		{"missing nested", "order.id", `{"order":{"ref":"r"}}`},
		{"parent missing", "order.id", `{"id":"top"}`},
		{"parent is null", "order.id", `{"order":null}`},
		{"null", "payment_id", `{"payment_id":null}`},
		{"null with spaces", "payment_id", `{"payment_id" : null }`},
		{"empty string", "payment_id", `{"payment_id":""}`},
		{"empty object", "payment_id", `{}`},
		{"name only inside a string", "payment_id", `{"note":"\"payment_id\":\"p-1\""}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantNoKey(t, lambdakit.KeyFromField(tc.path), tc.body)
		})
	}
}

// A key that cannot be read safely is not "no key": it is ErrInvalidKey,
// which fails the record even with ProcessWithoutKey.
func TestKeyFromFieldReportsInvalidKey(t *testing.T) {
	cases := []struct {
		name, path, body string
	}{
		{"parent is a string", "order.id", `{"order":"{\"id\":\"x\"}"}`},
		{"parent is an array", "order.id", `{"order":[{"id":"x"}]}`},
		{"object value", "payment_id", `{"payment_id":{"v":"x"}}`},
		{"array value", "payment_id", `{"payment_id":["x"]}`},
		{"not JSON", "payment_id", `payment_id=p-1`},
		{"truncated JSON", "payment_id", `{"payment_id":"p-1"`},
		{"trailing garbage", "payment_id", `{"payment_id":"p-1"} x`},
		{"a second object after the first", "payment_id", `{"payment_id":"p-1"}{"payment_id":"p-2"}`},
		{"empty body", "payment_id", ``},
		{"top-level array", "payment_id", `[{"payment_id":"p-1"}]`},
		{"top-level string", "payment_id", `"payment_id"`},
		{"top-level number", "payment_id", `42`},
		{"name differs in case", "payment_id", `{"Payment_ID":"p-1"}`},
		{"name named again in other case", "payment_id", `{"payment_id":"p-1","PAYMENT_ID":"p-2"}`},
		{"exponent out of range", "n", `{"n":1e99999999999}`},
		// A struct decodes a repeated member in turn: a later null keeps
		// the earlier value, a later object merges into it. The key could
		// differ from what the handler sees.
		{"name repeated", "id", `{"id":"first","id":"last"}`},
		{"name repeated, last null", "id", `{"id":"first","id":null}`},
		{"parent repeated", "order.id", `{"order":{"id":"o1"},"order":{}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyOf(t, lambdakit.KeyFromField(tc.path), tc.body)
			if !errors.Is(err, lambdakit.ErrInvalidKey) || errors.Is(err, lambdakit.ErrNoKey) || got != "" {
				t.Errorf("key of %s: got %q, %v; want \"\", ErrInvalidKey", tc.body, got, err)
			}
		})
	}
}

// TestKeyFromFieldsPanicsWithoutAPath checks that KeyFromFields refuses,
// when the function is built, to give every message the same key: with no
// path, each message after the first would be answered as its duplicate
// and never run.
func TestKeyFromFieldsPanicsWithoutAPath(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("KeyFromFields(\"Order\") with no path did not panic")
		}
	}()
	key := lambdakit.KeyFromFields("Order")
	m1, m2 := lambdakittest.Message(`{"id":"o-1"}`), lambdakittest.Message(`{"id":"o-2"}`)
	a, errA := key(&m1)
	b, errB := key(&m2)
	t.Logf("two orders keyed %q (%v) and %q (%v)", a, errA, b, errB)
}

func TestKeyFromFieldsJoinsPrefixAndValues(t *testing.T) {
	fn := lambdakit.KeyFromFields("Order", "aggregate_id", "meta.message_id")

	t.Run("joined with colons", func(t *testing.T) {
		wantKey(t, fn, `{"aggregate_id":"a","meta":{"message_id":"b"}}`, "Order:a:b")
	})
	t.Run("numbers as written", func(t *testing.T) {
		wantKey(t, fn, `{"aggregate_id":7,"meta":{"message_id":1.5}}`, "Order:7:1.5")
	})
	t.Run("colon and backslash in values do not collide", func(t *testing.T) {
		bodies := []string{
			`{"aggregate_id":"a:b","meta":{"message_id":"c"}}`,
			`{"aggregate_id":"a","meta":{"message_id":"b:c"}}`,
			`{"aggregate_id":"a\\","meta":{"message_id":"b:c"}}`,
			`{"aggregate_id":"a\\:b","meta":{"message_id":"c"}}`,
			`{"aggregate_id":"a\\","meta":{"message_id":":b:c"}}`,
		}
		seen := map[string]string{}
		for _, body := range bodies {
			key, err := keyOf(t, fn, body)
			if err != nil {
				t.Fatalf("key of %s: %v", body, err)
			}
			if other, ok := seen[key]; ok {
				t.Errorf("got key %q for both %s and %s; want different keys", key, other, body)
			}
			seen[key] = body
		}
		wantKey(t, fn, bodies[0], `Order:a\:b:c`)
		wantKey(t, fn, bodies[2], `Order:a\\:b\:c`)
	})
	t.Run("a missing field means no key", func(t *testing.T) {
		wantNoKey(t, fn, `{"aggregate_id":"a","meta":{}}`)
		wantNoKey(t, fn, `{"meta":{"message_id":"b"}}`)
	})
	t.Run("an empty field means no key", func(t *testing.T) {
		wantNoKey(t, fn, `{"aggregate_id":"","meta":{"message_id":"b"}}`)
	})
	t.Run("not JSON is an invalid key", func(t *testing.T) {
		if _, err := keyOf(t, fn, `Order:a:b`); !errors.Is(err, lambdakit.ErrInvalidKey) {
			t.Errorf("got %v; want ErrInvalidKey", err)
		}
	})
}

func TestKeyFromBodyHash(t *testing.T) {
	fn := lambdakit.KeyFromBodyHash()
	key := func(body string) string {
		t.Helper()
		k, err := keyOf(t, fn, body)
		if err != nil {
			t.Fatalf("key of %q: %v", body, err)
		}
		return k
	}

	t.Run("equal bodies give equal keys", func(t *testing.T) {
		if a, b := key(`{"payment_id":"p-1"}`), key(`{"payment_id":"p-1"}`); a != b {
			t.Errorf("got %q and %q; want equal keys", a, b)
		}
	})
	t.Run("different bodies give different keys", func(t *testing.T) {
		if a, b := key(`{"payment_id":"p-1"}`), key(`{"payment_id":"p-2"}`); a == b {
			t.Errorf("got %q for both; want different keys", a)
		}
		if a, b := key(`{"a":1}`), key(`{"a":1} `); a == b {
			t.Errorf("got %q for bodies differing in a byte; want different keys", a)
		}
	})
	t.Run("key is hex sha256 without the raw body", func(t *testing.T) {
		k := key(`{"card":"4111111111111111"}`)
		if len(k) != 64 || strings.Contains(k, "4111") {
			t.Errorf("got %q; want 64 hex characters", k)
		}
	})
	t.Run("empty body means no key", func(t *testing.T) {
		wantNoKey(t, fn, "")
	})
}

func TestKeyFromAttribute(t *testing.T) {
	fn := lambdakit.KeyFromAttribute("idempotency-key")

	t.Run("present", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`, lambdakittest.WithAttribute("idempotency-key", "k-1"))
		if got, err := fn(&msg); err != nil || got != "k-1" {
			t.Errorf("got %q, %v; want \"k-1\", nil", got, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`, lambdakittest.WithAttribute("other", "k-1"))
		if got, err := fn(&msg); !errors.Is(err, lambdakit.ErrNoKey) {
			t.Errorf("got %q, %v; want ErrNoKey", got, err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`, lambdakittest.WithAttribute("idempotency-key", ""))
		if got, err := fn(&msg); !errors.Is(err, lambdakit.ErrNoKey) {
			t.Errorf("got %q, %v; want ErrNoKey", got, err)
		}
	})
	t.Run("binary attribute without string value", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`)
		msg.MessageAttributes["idempotency-key"] = events.SQSMessageAttribute{BinaryValue: []byte("k"), DataType: "Binary"}
		if got, err := fn(&msg); !errors.Is(err, lambdakit.ErrNoKey) {
			t.Errorf("got %q, %v; want ErrNoKey", got, err)
		}
	})
}

func TestKeyFromMessageID(t *testing.T) {
	fn := lambdakit.KeyFromMessageID()

	t.Run("message ID is the key", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`)
		if got, err := fn(&msg); err != nil || got != msg.MessageId {
			t.Errorf("got %q, %v; want %q, nil", got, err, msg.MessageId)
		}
	})
	t.Run("redelivery has the same key", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`)
		again := lambdakittest.Redelivery(msg)
		a, _ := fn(&msg)
		b, _ := fn(&again)
		if a != b {
			t.Errorf("got %q then %q; want the same key", a, b)
		}
	})
	t.Run("empty message ID means no key", func(t *testing.T) {
		msg := lambdakittest.Message(`{}`)
		msg.MessageId = ""
		if got, err := fn(&msg); !errors.Is(err, lambdakit.ErrNoKey) {
			t.Errorf("got %q, %v; want ErrNoKey", got, err)
		}
	})
}

func TestPayloadFields(t *testing.T) {
	fn := lambdakit.PayloadFields("payment_id", "amount", "card.last4")
	payload := func(body string) string {
		t.Helper()
		msg := lambdakittest.Message(body)
		p, err := fn(&msg)
		if err != nil {
			t.Fatalf("payload of %s: %v", body, err)
		}
		return p
	}
	base := payload(`{"payment_id":"p-1","amount":10,"card":{"last4":"4242"},"sent_at":"2024-01-01T00:00:00Z"}`)

	t.Run("order of fields in body is irrelevant", func(t *testing.T) {
		got := payload(`{"sent_at":"2024-01-01T00:00:00Z","card":{"last4":"4242"},"amount":10,"payment_id":"p-1"}`)
		if got != base {
			t.Errorf("got %q; want %q", got, base)
		}
	})
	t.Run("irrelevant field changes do not change the payload", func(t *testing.T) {
		got := payload(`{"payment_id":"p-1","amount":10,"card":{"last4":"4242","exp":"12/30"},"sent_at":"2025-06-30T12:00:00Z","trace":"abc"}`)
		if got != base {
			t.Errorf("got %q; want %q", got, base)
		}
	})
	t.Run("relevant field changes change the payload", func(t *testing.T) {
		for _, body := range []string{
			`{"payment_id":"p-2","amount":10,"card":{"last4":"4242"}}`,
			`{"payment_id":"p-1","amount":11,"card":{"last4":"4242"}}`,
			`{"payment_id":"p-1","amount":"10","card":{"last4":"4242"}}`,
			`{"payment_id":"p-1","amount":10,"card":{"last4":"0000"}}`,
			`{"payment_id":"p-1","amount":10}`,
			`{"payment_id":"p-1","card":{"last4":"4242"}}`,
		} {
			if got := payload(body); got == base {
				t.Errorf("payload of %s: got %q, the same as the original; want a different payload", body, got)
			}
		}
	})
	t.Run("an object field after another is compared by value", func(t *testing.T) {
		// Each field's form is appended to the ones before it; an object
		// is ordered within its own part of that buffer.
		two := lambdakit.PayloadFields("id", "card")
		p := func(body string) string {
			t.Helper()
			msg := lambdakittest.Message(body)
			got, err := two(&msg)
			if err != nil {
				t.Fatalf("payload of %s: %v", body, err)
			}
			return got
		}
		a := p(`{"id":"p","card":{"b":1,"a":{"y":2,"x":3}}}`)
		if b := p(`{"card":{"a":{"x":3,"y":2},"b":1.0},"id":"p"}`); a != b {
			t.Errorf("got %q and %q; want one payload", a, b)
		}
		if c := p(`{"id":"p","card":{"b":2,"a":{"y":1,"x":3}}}`); a == c {
			t.Errorf("got %q for both; want two payloads", a)
		}
	})
	t.Run("moving a value to another field changes the payload", func(t *testing.T) {
		two := lambdakit.PayloadFields("a", "b")
		m1 := lambdakittest.Message(`{"a":"x"}`)
		m2 := lambdakittest.Message(`{"b":"x"}`)
		p1, err1 := two(&m1)
		p2, err2 := two(&m2)
		if err1 != nil || err2 != nil || p1 == p2 {
			t.Errorf("got %q, %v and %q, %v; want two different payloads", p1, err1, p2, err2)
		}
	})
	t.Run("not JSON is an error", func(t *testing.T) {
		msg := lambdakittest.Message(`payment_id=p-1`)
		if p, err := fn(&msg); err == nil {
			t.Errorf("got %q, nil; want an error", p)
		}
	})
}

// fuzzSeeds are realistic bodies, and the shapes that once broke a scanner.
var fuzzSeeds = []string{
	`{"a":"x"}`,
	`{"a":42}`,
	`{"a":-0.5e-7}`,
	`{"a":true,"b":false}`,
	`{"a":null}`,
	`{"a":""}`,
	`{"a":{"b":"nested"}}`,
	`{"a":{"b":7,"c":[1,2,{"b":"no"}]}}`,
	`{"a":{"b":null}}`,
	`{"a":{"b":{"c":1}}}`,
	`{"a":[{"b":"x"}]}`,
	`{"b":{"a":"wrong level"}}`,
	`{}`,
	`{"x":"}\"{","a":"after"}`,
	`{"x":{"s":"}","a":"fake"},"a":"real"}`,
	`{"x":["]","a",{"a":"fake"}],"a":{"b":"real"}}`,
	`{"x":["a","{\"a\":1}"],"a":"real"}`,
	`{"\u0061":"escaped name"}`,
	`{"a":"\u00e9\ud83d\ude00\n\t\"\\"}`,
	`{"a":"\ud800"}`,
	`{"a":"first","a":"last"}`,
	`{"a":{"b":"first"},"a":{"c":"x"}}`,
	`{"a":{"b":"x","b":null}}`,
	` { "a" : { "b" : "spaced" } } `,
	`{"payment_id":"p-1","amount":1999,"currency":"EUR","a":{"b":"order-17"},"sent_at":"2024-01-01T00:00:00Z"}`,
	`{"Records":[{"body":"{\"a\":1}"}],"a":"ok"}`,
}

func FuzzKeyFromField(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	top, nested := lambdakit.KeyFromField("a"), lambdakit.KeyFromField("a.b")
	payload := lambdakit.PayloadFields("a", "a.b")
	f.Fuzz(func(t *testing.T, body string) {
		msg := lambdakittest.Message(body)
		// Never panic, whatever the body.
		gotTop, errTop := top(&msg)
		gotNested, errNested := nested(&msg)
		_, _ = payload(&msg)

		// SQS bodies are valid Unicode; encoding/json replaces invalid
		// UTF-8, so compare only where the two can agree.
		if !utf8.ValidString(body) {
			return
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil || dec.More() || m == nil || !json.Valid([]byte(body)) {
			if !errors.Is(errTop, lambdakit.ErrInvalidKey) || !errors.Is(errNested, lambdakit.ErrInvalidKey) {
				t.Fatalf("body %q is not a JSON object: got keys %q, %v and %q, %v; want ErrInvalidKey", body, gotTop, errTop, gotNested, errNested)
			}
			return
		}
		// A member named twice is invisible to map decoding, but makes
		// the key ambiguous (a struct decodes each repeat in turn): such a
		// body may have an invalid key, or the key found otherwise.
		if repeatsNames(t, body) && errors.Is(errTop, lambdakit.ErrInvalidKey) {
			return
		}
		// A member named like the field but for case makes it ambiguous:
		// an invalid key (see KeyFromField).
		checkFuzzKey(t, body, "a", gotTop, errTop, fuzzWant(m, "a"))
		var nested expected
		switch inner := m["a"].(type) {
		case nil: // no parent: no key
		case map[string]any:
			nested = fuzzWant(inner, "b")
		default: // a parent that is not an object
			nested.invalid = true
		}
		if hasCaseVariant(m, "a") {
			nested = expected{invalid: true}
		}
		if repeatsNames(t, body) && errors.Is(errNested, lambdakit.ErrInvalidKey) {
			return
		}
		checkFuzzKey(t, body, "a.b", gotNested, errNested, nested)
	})
}

// expected is what KeyFromField should make of a decoded value: a key, no
// key, or an invalid key. A number key is compared by value.
type expected struct {
	key     string
	number  bool
	ok      bool
	invalid bool
}

// fuzzWant is what KeyFromField(name) should find in the decoded object m.
func fuzzWant(m map[string]any, name string) expected {
	if hasCaseVariant(m, name) {
		return expected{invalid: true}
	}
	switch v := m[name].(type) {
	case string:
		return expected{key: v, ok: v != ""}
	case json.Number:
		return expected{key: string(v), number: true, ok: true}
	case bool:
		return expected{key: strconv.FormatBool(v), ok: true}
	case nil: // missing or null
		return expected{}
	default: // object or array
		return expected{invalid: true}
	}
}

func hasCaseVariant(m map[string]any, name string) bool {
	for k := range m {
		if k != name && strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

func checkFuzzKey(tb testing.TB, body, path, got string, err error, want expected) {
	tb.Helper()
	switch {
	case want.ok && want.number && exponentBeyondBillion(want.key):
		// Refused rather than expanded (see appendCanonicalNumber).
		if !errors.Is(err, lambdakit.ErrInvalidKey) {
			tb.Fatalf("KeyFromField(%q) of %q: got %q, %v; want ErrInvalidKey for an exponent beyond a billion", path, body, got, err)
		}
	case want.ok && want.number:
		if err != nil || !sameNumber(got, want.key) {
			tb.Fatalf("KeyFromField(%q) of %q: got %q, %v; want the number %s by value", path, body, got, err, want.key)
		}
	case want.ok && (err != nil || got != want.key):
		tb.Fatalf("KeyFromField(%q) of %q: got %q, %v; want %q (as encoding/json decodes it)", path, body, got, err, want.key)
	case want.invalid && !errors.Is(err, lambdakit.ErrInvalidKey):
		tb.Fatalf("KeyFromField(%q) of %q: got %q, %v; want ErrInvalidKey", path, body, got, err)
	case !want.ok && !want.invalid && !errors.Is(err, lambdakit.ErrNoKey):
		tb.Fatalf("KeyFromField(%q) of %q: got %q, %v; want ErrNoKey", path, body, got, err)
	}
}

// exponentBeyondBillion reports whether the JSON number n has an exponent
// whose magnitude is over a billion.
func exponentBeyondBillion(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	e, ok := new(big.Int).SetString(strings.TrimPrefix(n[i+1:], "+"), 10)
	return ok && e.CmpAbs(big.NewInt(1e9)) > 0
}

// sameNumber reports whether a and b spell the same number, exactly. Numbers
// with an exponent beyond ±1000 are too costly to expand, and not checked.
func sameNumber(a, b string) bool {
	for _, n := range []string{a, b} {
		if i := strings.IndexAny(n, "eE"); i >= 0 {
			if e, err := strconv.Atoi(n[i+1:]); err != nil || e > 1000 || e < -1000 {
				return true
			}
		}
	}
	ra, oka := new(big.Rat).SetString(a)
	rb, okb := new(big.Rat).SetString(b)
	return oka && okb && ra.Cmp(rb) == 0
}

// The key functions validate the whole body in the same pass that finds the
// field: they must accept exactly what encoding/json accepts.
func TestKeyFromFieldAgreesWithJSONValid(t *testing.T) {
	bodies := []string{
		`{"a":"k"}`, `{"a":"k","b":01}`, `{"a":"k","b":1.}`, `{"a":"k","b":-}`, `{"a":"k","b":1e}`,
		`{"a":"k","b":1e+5}`, `{"a":"k","b":-0.5E-3}`, `{"a":"k","b":"\u12G4"}`, `{"a":"k","b":"\x"}`,
		"{\"a\":\"k\",\"b\":\"tab\there\"}", `{"a":"k","b":[1,2,]}`, `{"a":"k",}`, `{"a":"k"}}`,
		`{"a":"k","b":tru}`, `{"a":"k","b":nulls}`, `{"a":"k","b":{"c":[{"d":null}]}}`, ` {"a":"k"} `,
		`{"a":"k"} x`, `{"a":"k"`, `{"a" "k"}`, `{a:"k"}`, `{"a":"k","b":"\ud800"}`,
		`{"a":"k","b":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		`{"a":"k","b":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`,
	}
	key := lambdakit.KeyFromField("a")
	for _, body := range bodies {
		msg := lambdakittest.Message(body)
		got, err := key(&msg)
		valid := json.Valid([]byte(body))
		name := body
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		switch {
		case valid && (err != nil || got != "k"):
			t.Errorf("%s: valid JSON; got %q, %v; want key k", name, got, err)
		case !valid && !errors.Is(err, lambdakit.ErrInvalidKey):
			t.Errorf("%s: not valid JSON; got %q, %v; want ErrInvalidKey", name, got, err)
		}
	}
}

func TestKeyFromFieldRefusesNamesThatDifferOnlyInCase(t *testing.T) {
	cases := map[string]string{
		"upper-case twin after":  `{"payment_id":"p1","PAYMENT_ID":"p2"}`,
		"mixed-case twin before": `{"Payment_Id":"p2","payment_id":"p1"}`,
		"only a variant":         `{"PAYMENT_ID":"p2"}`,
		"escaped variant":        `{"payment_id":"p1","\u0050AYMENT_ID":"p2"}`,
		"Kelvin sign variant":    `{"k":"p1","\u212a":"p2"}`,
		"nested variant":         `{"order":{"id":"o1","ID":"o2"}}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			path := "payment_id"
			switch {
			case strings.Contains(body, `"k"`):
				path = "k"
			case strings.Contains(body, "order"):
				path = "order.id"
			}
			msg := lambdakittest.Message(body)
			got, err := lambdakit.KeyFromField(path)(&msg)
			if !errors.Is(err, lambdakit.ErrInvalidKey) {
				t.Errorf("got %q, %v; want ErrInvalidKey: the decoders disagree on which member counts", got, err)
			}
			if _, err := lambdakit.PayloadFields(path)(&msg); err == nil {
				t.Error("PayloadFields: got nil error; want the ambiguity refused")
			}
		})
	}
	t.Run("other fields may differ in case from each other", func(t *testing.T) {
		msg := lambdakittest.Message(`{"payment_id":"p1","Amount":5,"AMOUNT_CENTS":500}`)
		if got, err := lambdakit.KeyFromField("payment_id")(&msg); err != nil || got != "p1" {
			t.Errorf("got %q, %v; want p1", got, err)
		}
	})
}

// A numeric key is one key however it is spelled: 1, 1.0, 1e0 and 10e-1
// are the same number, and so the same record.
func TestIdempotentNumericKeySpellingsAreOneKey(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	fx := &testenv.Counter{}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), quiet, func(o *lambdakit.Options) {
		o.DisableValidation = true
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		fx.Add("1")
		return nil, nil
	}))
	for _, body := range []string{`{"id":1}`, `{"id":1.0}`, `{"id":1e0}`, `{"id":10e-1}`, `{"id":0.1E1}`} {
		if _, err := handle(t, h, lambdakittest.Message(body)); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	if n := fx.Count("1"); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
	if recs := store.Records(); len(recs) != 1 {
		t.Errorf("got %d records; want 1", len(recs))
	}
}

// PayloadFields reads fields of the body itself in one pass over it, and
// with a field of a nested object among them, each field in a pass of its
// own: either way each field reads as it reads alone, errors included.
func FuzzPayloadFieldsReadsEachFieldAsAlone(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, s := range []string{`{"a":1,"b":2}`, `{"a":1,"A":2}`, `{"b":null,"a":"x","a":"y"}`, `[1]`, `{"a":1`, `{"x":{"y":3},"b":[1,{"a":2}]}`} {
		f.Add(s)
	}
	alone := func(msg *events.SQSMessage, paths ...string) (string, error) {
		var out string
		for _, p := range paths {
			got, err := lambdakit.PayloadFields(p)(msg)
			if err != nil {
				return "", err
			}
			out += got
		}
		return out, nil
	}
	same := func(t *testing.T, body, how string, got string, err error, want string, wantErr error) {
		t.Helper()
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || got != want {
			t.Fatalf("body %q, %s: got %q, %v; want %q, %v, as each field alone", body, how, got, err, want, wantErr)
		}
	}
	onePass, eachPass := lambdakit.PayloadFields("a", "b", "A"), lambdakit.PayloadFields("a", "b", "A", "x.y")
	f.Fuzz(func(t *testing.T, body string) {
		msg := lambdakittest.Message(body)
		got, err := onePass(&msg)
		want, wantErr := alone(&msg, "a", "b", "A")
		same(t, body, "one pass", got, err, want, wantErr)
		got, err = eachPass(&msg)
		want, wantErr = alone(&msg, "a", "b", "A", "x.y")
		same(t, body, "a pass each", got, err, want, wantErr)
	})
}

// PayloadFields allocates for the fields it reads, not for the body: a
// body may be mostly other fields (a document beside a payment's ID).
func TestPayloadFieldsAllocatesForTheFieldsNotTheBody(t *testing.T) {
	fn := lambdakit.PayloadFields("id", "amount")
	msg := lambdakittest.Message(`{"id":"p-1","amount":100,"doc":"` + strings.Repeat("x", 200<<10) + `"}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 20
	for range calls {
		if _, err := fn(&msg); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 4<<10 {
		t.Errorf("PayloadFields allocated %d bytes a call for a 200 KB body; want the fields' size, under 4 KB", per)
	}
}

// keysAndPayloadsOf is what a record of body is stored under and checked
// against: the keys of a top-level, a nested and a joined key function,
// and the first 16 hex digits of the hash of each payload (fields of the
// body, a nested field, the whole body). An error is its kind.
func keysAndPayloadsOf(body string) string {
	msg := lambdakittest.Message(body)
	kind := func(err error) string {
		switch {
		case errors.Is(err, lambdakit.ErrInvalidKey):
			return "invalid"
		case errors.Is(err, lambdakit.ErrNoKey):
			return "nokey"
		case errors.Is(err, lambdakit.ErrDecode):
			return "decode"
		}
		return "error " + err.Error()
	}
	var out []string
	for _, fn := range []lambdakit.KeyFunc{
		lambdakit.KeyFromField("payment_id"),
		lambdakit.KeyFromField("order.id"),
		lambdakit.KeyFromFields("Order", "payment_id", "order_id"),
	} {
		k, err := fn(&msg)
		if err != nil {
			k = kind(err)
		}
		out = append(out, k)
	}
	for _, fn := range []lambdakit.PayloadFunc{
		lambdakit.PayloadFields("payment_id", "order_id", "customer_id", "amount", "currency"),
		lambdakit.PayloadFields("order.id", "amount"),
		lambdakit.PayloadBody,
	} {
		p, err := fn(&msg)
		if err != nil {
			out = append(out, kind(err))
			continue
		}
		out = append(out, lambdakit.KeyHash(p)[:16])
	}
	return strings.Join(out, " | ")
}

// Records are stored under the hash of their key and keep the hash of
// their payload: a key that changed would run a payment twice, a payload
// hash that changed would fail every retry of a message handled before a
// deploy with ErrPayloadMismatch. These are what lambdakit computed before
// the key and the payload hash were made cheaper; they must never change.
func TestKeysAndPayloadHashesStayAsRecordsKeepThem(t *testing.T) {
	if got, want := lambdakit.RecordID("payments", "pay_1"), "payments#6ec81111d581d10d7725c768ec7408574fb3bc895f76ec93e678dd3d469db8cf"; got != want {
		t.Errorf("RecordID = %s, records hold %s", got, want)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":1299,"currency":"EUR"}`,
			`pay_1 | nokey | Order:pay_1:ord_1 | 4560d2cf60e2d49e | e088eff5c495bdb4 | df7d18d6d3a0a99a`},
		{` { "currency" : "\u0045UR" , "amount":1.299e3,"customer_id":"cus_1",	"order_id":"ord\u005f1","payment_id":"pay_1" } `,
			`pay_1 | nokey | Order:pay_1:ord_1 | 4560d2cf60e2d49e | e088eff5c495bdb4 | df7d18d6d3a0a99a`},
		{`{"payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":1299,"currency":"EUR","sent_at":"2024-01-01T00:00:00Z","order":{"id":"o-9"}}`,
			`pay_1 | o-9 | Order:pay_1:ord_1 | 4560d2cf60e2d49e | a9a34a0536b7bc6f | 327ca6035f0f3d17`},
		{`{"payment_id":"p\u00e1y-\u00e9\ud83d\ude00","order_id":"\u20ac/\/\\\"\b\f\n\r\t","amount":-0.0000015,"currency":"€"}`,
			"páy-é😀 | nokey | Order:páy-é😀:€//\\\\\"\b\f\n\r\t | ad0a42d491884011 | 3eb64d91971ff459 | ea5aaa63a6d98253"},
		{`{"payment_id":"lone \ud800 surrogate","order_id":"x\udc00y","amount":0}`,
			`lone � surrogate | nokey | Order:lone � surrogate:x�y | 197e77caa0b8d3da | 7a4a4bef044b6881 | 7bd476d5b5d2bd23`},
		{"{\"payment_id\":\"invalid \xff utf8\",\"amount\":\"\xc3(\"}",
			`invalid � utf8 | nokey | nokey | 688d4407778a710f | a95ee181b1a87a31 | daf94ec863a4157b`},
		{`{"payment_id":1,"amount":1}`,
			`1 | nokey | nokey | 0fafc3075d48e466 | 93aa5ace8429c700 | 98fb8c114031280f`},
		{`{"payment_id":1.0,"amount":1.0}`,
			`1 | nokey | nokey | 0fafc3075d48e466 | 93aa5ace8429c700 | 98fb8c114031280f`},
		{`{"payment_id":10e-1,"amount":1e0}`,
			`1 | nokey | nokey | 0fafc3075d48e466 | 93aa5ace8429c700 | 98fb8c114031280f`},
		{`{"payment_id":-0,"amount":-0.0}`,
			`0 | nokey | nokey | 54602e685fd0c8c5 | 7a4a4bef044b6881 | a6ac6e3913326bb4`},
		{`{"payment_id":0.0e5,"amount":0}`,
			`0 | nokey | nokey | 54602e685fd0c8c5 | 7a4a4bef044b6881 | a6ac6e3913326bb4`},
		{`{"payment_id":1E+2,"amount":100}`,
			`100 | nokey | nokey | 8a3a03247e0aac36 | 4913b9507fc3f52b | 58dfc6a6984f3525`},
		{`{"payment_id":12.50,"amount":-12.5}`,
			`12.5 | nokey | nokey | 24f9d71e74864e9c | b0f205ab56d7ddcd | ae8a37a933a46ec6`},
		{`{"payment_id":1e40,"amount":1e41}`,
			`1e40 | nokey | nokey | 9337fde6d830bf0d | bd2f39388cc50ca6 | 283744561eab0203`},
		{`{"payment_id":1.5e-7,"amount":0.0000015}`,
			`1.5e-7 | nokey | nokey | 67d01236eed29576 | 0625902c28643164 | f0c547afdaec00a6`},
		{`{"payment_id":-0.000001,"amount":1234567890123456789012345678901234567890}`,
			`-0.000001 | nokey | nokey | 9da58607728ed675 | 5251f3e00aaacbaa | 80a9415878738977`},
		{`{"payment_id":12345678901234567890123456789012345678901,"amount":0.1e-6}`,
			`1.2345678901234567890123456789012345678901e40 | nokey | nokey | 17fdb7e1b6a122e6 | 8ff87f7eb9c698d9 | 0e4771676f67ec00`},
		{`{"payment_id":1e1000000001,"amount":1}`,
			`invalid | nokey | invalid | decode | 93aa5ace8429c700 | decode`},
		{`{"payment_id":"a","amount":-1e-1000000001}`,
			`a | nokey | nokey | decode | decode | decode`},
		{`{"payment_id":true,"order_id":false,"amount":true}`,
			`true | nokey | Order:true:false | b9cad8f490789155 | 9e09c18812a40be8 | c5c2d25816b29e61`},
		{`{"payment_id":{"a":1},"amount":1}`,
			`invalid | nokey | invalid | f85cfb390f6f6bdc | 93aa5ace8429c700 | f59709e70012f7a7`},
		{`{"payment_id":["a"],"amount":1}`,
			`invalid | nokey | invalid | dbf6e8761cbc55f4 | 93aa5ace8429c700 | 74ee2586d7d3206d`},
		{`{"payment_id":"p","amount":{"value":10,"currency":"EUR","Value":1},"currency":["a",{"z":1,"y":[null,true,false,"s"]},[]]}`,
			`p | nokey | nokey | 3bdbd212aa6c96a3 | 5ee6315147eb109d | f1555550023cac58`},
		{`{"payment_id":"p","amount":{"b":{"d":{},"c":[{"f":1,"e":2}]},"a":1},"currency":{}}`,
			`p | nokey | nokey | f546701f24908826 | ae2de7e77bac0a20 | 62b2d9a98505bd86`},
		{`{"payment_id":"p","amount":{"\u212aey":1,"key":2,"KEY":3,"ſ":4,"s":5}}`,
			`p | nokey | nokey | d4d7394493b3a4f5 | de9a1f20e9669b27 | df622a759cc2b04d`},
		{`{"payment_id":"a","payment_id":"b"}`,
			`invalid | nokey | invalid | decode | 5ce9f17883ad490e | 540d08d230af0177`},
		{`{"payment_id":"a","PAYMENT_ID":"b"}`,
			`invalid | nokey | invalid | decode | 5ce9f17883ad490e | 1f1f46007ee68790`},
		{`{"payment_id":"a","amount":1,"amount":2}`,
			`a | nokey | nokey | decode | decode | 87f7c6367933cc2f`},
		{`{"payment_id":"a","Amount":1}`,
			`a | nokey | nokey | decode | decode | 1dc3f96d2444d570`},
		{`{"payment_id":"a","amount":null,"amount":2}`,
			`a | nokey | nokey | decode | decode | 949074c744254fbc`},
		{`{"payment_id":"a"}`,
			`a | nokey | nokey | 662b5abc1110631b | 5ce9f17883ad490e | cf41d255ea5212e0`},
		{`{"payment_id":null,"amount":null,"currency":null}`,
			`nokey | nokey | nokey | efe023c0d5e1ca00 | 5ce9f17883ad490e | 4b6281d0bba2b9d6`},
		{`{"payment_id":"","amount":1}`,
			`nokey | nokey | nokey | 3379c4ccf453e741 | 93aa5ace8429c700 | 8ba91f30a6e3bea6`},
		{`{"amount":1}`,
			`nokey | nokey | nokey | 98e53624c110e148 | 93aa5ace8429c700 | 82377aef109fb88a`},
		{`{}`,
			`nokey | nokey | nokey | efe023c0d5e1ca00 | 5ce9f17883ad490e | 44136fa355b3678a`},
		{`[1,2]`,
			`invalid | invalid | invalid | decode | decode | 641e3049ef38e7a9`},
		{`"str"`,
			`invalid | invalid | invalid | decode | decode | b36cb9d6c0cf91dc`},
		{`42`,
			`invalid | invalid | invalid | decode | decode | 25d95049a62fd1da`},
		{`null`,
			`invalid | invalid | invalid | decode | decode | 1b16b1df538ba12d`},
		{`not json`,
			`invalid | invalid | invalid | decode | decode | d96ef7c9193f1fa2`},
		{`{"payment_id":"a",}`,
			`invalid | invalid | invalid | decode | decode | 874d4b83715bb827`},
		{`{"payment_id":"a"} x`,
			`invalid | invalid | invalid | decode | decode | f9e6ebd9f96fe08d`},
		{``,
			`invalid | invalid | invalid | decode | decode | 454349e422f05297`},
		{"\t\r\n\t{\n\"payment_id\" : \"a\" }\r\n",
			`a | nokey | nokey | 662b5abc1110631b | 5ce9f17883ad490e | cf41d255ea5212e0`},
		{`{"payment_id":"a:b\\c","order_id":"d:e"}`,
			`a:b\c | nokey | Order:a\:b\\c:d\:e | e08974725ca8a38d | 5ce9f17883ad490e | 35c2a3de63620df1`},
		{`{"payment_id":"a","order_id":""}`,
			`a | nokey | nokey | 3c23420011206c7a | 5ce9f17883ad490e | e1955146d480f576`},
		{`{"order":{"id":"o-1","lines":[{"sku":"x","qty":2}]},"payment_id":"p","order_id":"o-1"}`,
			`p | o-1 | Order:p:o-1 | 32c10c1629fcb177 | adb7a7b2dda8bd93 | 42cefb3be98c8523`},
		{`{"order":{"id":17.0},"amount":[1,2.0,3e0]}`,
			`nokey | 17 | nokey | 145e368fe8b4eb64 | 434c7f82ad5e877c | a527272712a21832`},
		{`{"order":{"id":null},"amount":1}`,
			`nokey | nokey | nokey | 98e53624c110e148 | 93aa5ace8429c700 | b22f13a89dae7689`},
		{`{"order":null,"amount":1}`,
			`nokey | nokey | nokey | 98e53624c110e148 | 93aa5ace8429c700 | 36217deea0c474eb`},
		{`{"order":"str","amount":1}`,
			`nokey | invalid | nokey | 98e53624c110e148 | decode | 8f734f7775429f80`},
		{`{"order":{"id":"a","ID":"b"},"amount":1}`,
			`nokey | invalid | nokey | 98e53624c110e148 | decode | 21230b3fec9dc536`},
		{`{"order":{"id":"a"},"order":{"id":"b"}}`,
			`nokey | invalid | nokey | efe023c0d5e1ca00 | decode | 12d843ebce14b2e0`},
		{`{"payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":1299,"currency":"EUR","doc":{"deep":[[[[{"x":"y"}]]]]}}`,
			`pay_1 | nokey | Order:pay_1:ord_1 | 4560d2cf60e2d49e | e088eff5c495bdb4 | 12ce15b0303f3a26`},
	} {
		if got := keysAndPayloadsOf(tc.body); got != tc.want {
			t.Errorf("keys and payload hashes of %s:\n got %s\nwant %s", tc.body, got, tc.want)
		}
	}
}

// PayloadFields hands over the buffer it wrote a payload in, uncopied: a
// payload must stay what it was after later records are read (the engine
// may hash it after the next record's payload is made, or keep it).
func TestPayloadFieldsPayloadStaysAfterLaterCalls(t *testing.T) {
	fn := lambdakit.PayloadFields("payment_id", "amount")
	first := lambdakittest.Message(`{"payment_id":"p-1","amount":10}`)
	p, err := fn(&first)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Clone(p)
	for i := range 3 {
		msg := lambdakittest.Message(`{"payment_id":"q-` + strconv.Itoa(i) + `","amount":99}`)
		if _, err := fn(&msg); err != nil {
			t.Fatal(err)
		}
	}
	if p != want {
		t.Errorf("payload changed after later calls: %q, was %q", p, want)
	}
}

// A member's first letter, spelled as an escape or as a letter that folds
// to an ASCII one only under Unicode folding (the Kelvin sign, the long s),
// is read as a120910 read it, before the first-letter shortcut of
// keyMatches: an escaped "p" is the field, an escaped capital or a
// Unicode fold of the name makes the key unsafe, and a dotless or dotted
// capital i is another name. (The outcomes were checked against a copy of
// a120910's package, with a differential fuzz run of a million inputs.)
func TestKeyFromFieldFoldsEscapedAndUnicodeFirstLettersAsBefore(t *testing.T) {
	for _, c := range []struct {
		body, path string
		want       error // nil: the key is "p1"
	}{
		{`{"\u0070ayment_id":"p1"}`, "payment_id", nil},
		{`{"\u0050AYMENT_ID":"p1"}`, "payment_id", lambdakit.ErrInvalidKey},
		{`{"payment_id":"p1","\u0050ayment_id":"p2"}`, "payment_id", lambdakit.ErrInvalidKey},
		{`{"payment_\u212aey":"p1"}`, "payment_key", lambdakit.ErrInvalidKey},
		{"{\"\u017fku\":\"p1\"}", "sku", lambdakit.ErrInvalidKey},
		{"{\"sku\":\"p1\",\"\u017fku\":\"p2\"}", "sku", lambdakit.ErrInvalidKey},
		{"{\"\u0131d\":\"p1\"}", "id", lambdakit.ErrNoKey},
		{"{\"\u0130d\":\"p1\"}", "id", lambdakit.ErrNoKey},
	} {
		key, err := lambdakit.KeyFromField(c.path)(&events.SQSMessage{Body: c.body})
		if c.want == nil && (err != nil || key != "p1") || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("body %s, field %s: key %q, %v; want %v", c.body, c.path, key, err, c.want)
		}
	}
}
