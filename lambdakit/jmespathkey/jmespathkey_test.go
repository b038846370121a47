package jmespathkey_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/jmespathkey"
)

func gzipBase64(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// The expressions are those Powertools' idempotency docs show for SQS and
// for payload subsets, evaluated on an SQS record.
func TestKeyFromJMESPathPowertoolsExpressions(t *testing.T) {
	order := `{"order_id":"o-1","customer_id":"c-7","amount":12.5,"paid":true,"lines":[]}`
	tests := []struct {
		name, expr, body string
		msg              events.SQSMessage
		want             string
		err              error
	}{
		{name: "record field", expr: "messageId", want: "m-1"},
		{name: "body field", expr: "powertools_json(body).order_id", body: order, want: "o-1"},
		{name: "list keyed as a whole", expr: "powertools_json(body).[customer_id, order_id]", body: order, want: `["c-7","o-1"]`},
		{name: "list with one null keyed", expr: "powertools_json(body).[customer_id, missing]", body: order, want: `["c-7",null]`},
		{name: "number keyed by value", expr: "powertools_json(body).amount", body: order, want: "12.5"},
		{name: "integer spelt otherwise is one key", expr: "powertools_json(body).n", body: `{"n":1.0e0}`, want: "1"},
		{name: "boolean", expr: "powertools_json(body).paid", body: order, want: "true"},
		{name: "object, members sorted", expr: "powertools_json(body).o", body: `{"o":{"b":1,"a":"x"}}`, want: `{"a":"x","b":1}`},
		{name: "attribute", expr: `messageAttributes."idempotency-key".stringValue`, want: "k-9"},
		{name: "base64", expr: "powertools_json(powertools_base64(body)).order_id", body: base64.StdEncoding.EncodeToString([]byte(order)), want: "o-1"},
		{name: "base64 gzip", expr: "powertools_json(powertools_base64_gzip(body)).order_id", body: gzipBase64(t, order), want: "o-1"},
		{name: "missing", expr: "powertools_json(body).nope", body: order, err: lambdakit.ErrNoKey},
		{name: "empty string", expr: "powertools_json(body).e", body: `{"e":""}`, err: lambdakit.ErrNoKey},
		{name: "empty list", expr: "powertools_json(body).lines", body: order, err: lambdakit.ErrNoKey},
		{name: "list of nulls", expr: "powertools_json(body).[a, b]", body: order, err: lambdakit.ErrNoKey},
		{name: "empty object", expr: "powertools_json(body).o", body: `{"o":{}}`, err: lambdakit.ErrNoKey},
		{name: "body not JSON", expr: "powertools_json(body).order_id", body: "order o-1", err: lambdakit.ErrInvalidKey},
		{name: "trailing bytes", expr: "powertools_json(body).order_id", body: order + "{}", err: lambdakit.ErrInvalidKey},
		{name: "name again in other case", expr: "powertools_json(body).payment_id", body: `{"payment_id":"p-1","PAYMENT_ID":"p-2"}`, err: lambdakit.ErrInvalidKey},
		{name: "name twice", expr: "powertools_json(body).payment_id", body: `{"payment_id":"p-1","payment_id":"p-2"}`, err: lambdakit.ErrInvalidKey},
		{name: "id beyond float64", expr: "powertools_json(body).id", body: `{"id":9007199254740993}`, err: lambdakit.ErrInvalidKey},
		{name: "bad base64", expr: "powertools_base64(body)", body: "%%%", err: lambdakit.ErrInvalidKey},
		{name: "wrong type", expr: "powertools_json(attributes)", err: lambdakit.ErrInvalidKey},
		{name: "members of text that is not JSON", expr: "powertools_json(messageId).*", err: lambdakit.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := jmespathkey.KeyFromJMESPath(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			msg := sqsRecord(tt.body)
			got, err := key(&msg)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("got %q, %v; want %v", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// sqsRecord is a record of a batch with body, as Lambda gives it.
func sqsRecord(body string) events.SQSMessage {
	return events.SQSMessage{
		MessageId:  "m-1",
		Body:       body,
		Attributes: map[string]string{"MessageGroupId": "g-1", "SentTimestamp": "1700000000000"},
		MessageAttributes: map[string]events.SQSMessageAttribute{
			"idempotency-key": {DataType: "String", StringValue: ptr("k-9")},
			"x":               {DataType: "String", StringValue: ptr("clé ✓")},
		},
	}
}

func TestKeyFromJMESPathRefusesABadExpressionAtStart(t *testing.T) {
	for _, expr := range []string{"powertools_json(body", "powertools_jsn(body).id", "[?"} {
		if _, err := jmespathkey.KeyFromJMESPath(expr); !errors.Is(err, jmespathkey.ErrExpression) {
			t.Errorf("%q: got %v, want ErrExpression", expr, err)
		}
		if _, err := jmespathkey.PayloadFromJMESPath(expr); !errors.Is(err, jmespathkey.ErrExpression) {
			t.Errorf("payload %q: got %v, want ErrExpression", expr, err)
		}
	}
}

func TestGunzipIsBounded(t *testing.T) {
	key, err := jmespathkey.KeyFromJMESPath("powertools_base64_gzip(body)")
	if err != nil {
		t.Fatal(err)
	}
	msg := events.SQSMessage{Body: gzipBase64(t, strings.Repeat("a", jmespathkey.MaxGunzipBytes+1))}
	if _, err := key(&msg); !errors.Is(err, lambdakit.ErrInvalidKey) {
		t.Fatalf("got %v, want ErrInvalidKey", err)
	}
}

// A payload subset as Powertools' docs select one: a retry that changes
// only other fields is the same payload; another amount is not.
func TestPayloadFromJMESPathComparesTheSelection(t *testing.T) {
	payload, err := jmespathkey.PayloadFromJMESPath(`powertools_json(body).["amount", "currency"]`)
	if err != nil {
		t.Fatal(err)
	}
	p := func(body string) string {
		t.Helper()
		s, err := payload(&events.SQSMessage{Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := p(`{"amount":100,"currency":"EUR","sent_at":"10:00"}`)
	if retry := p(`{"sent_at":"10:01","currency":"EUR","amount":1e2}`); retry != first {
		t.Errorf("retry %q, first %q: want equal", retry, first)
	}
	if other := p(`{"amount":101,"currency":"EUR"}`); other == first {
		t.Errorf("another amount gave the same payload %q", other)
	}
	if _, err := payload(&events.SQSMessage{Body: "not json"}); !errors.Is(err, lambdakit.ErrDecode) {
		t.Errorf("got %v, want ErrDecode", err)
	}
}

// An expression the parser panics on (go-jmespath v1.1.1: a character
// outside ASCII in an unquoted identifier) is refused as invalid, as a
// misspelt one is, when the function starts; it does not panic.
func TestJMESPathRefusesAnExpressionTheParserPanicsOn(t *testing.T) {
	for _, expr := range []string{"A\u0080", "body.é"} {
		if _, err := jmespathkey.KeyFromJMESPath(expr); !errors.Is(err, jmespathkey.ErrExpression) {
			t.Errorf("KeyFromJMESPath(%q): %v; want ErrExpression", expr, err)
		}
		if _, err := jmespathkey.PayloadFromJMESPath(expr); !errors.Is(err, jmespathkey.ErrExpression) {
			t.Errorf("PayloadFromJMESPath(%q): %v; want ErrExpression", expr, err)
		}
	}
}

// Reading a body's numbers costs a bounded, small amount of work each: a
// body of 2M numbers (4 MiB, which powertools_base64_gzip inflates from a
// 6 KB message) took 4 s when each number built a strings.Replacer (13
// allocations a number); encoding/json's tokens take 8.
func TestPowertoolsJSONReadsEachNumberCheaply(t *testing.T) {
	key, err := jmespathkey.KeyFromJMESPath("powertools_json(body).a")
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(n int) float64 {
		msg := events.SQSMessage{Body: "[" + strings.Repeat("1.5,", n) + "1]"}
		return testing.AllocsPerRun(3, func() { _, _ = key(&msg) })
	}
	const n = 1000
	if per := (allocs(n) - allocs(0)) / n; per >= 10 {
		t.Errorf("%.1f allocations a number; want fewer than 10", per)
	}
}

// A record of 1 MiB, SQS's largest, of realistic order lines decodes within
// MaxJSONValues: the bound refuses inflated bodies of tiny values, not large ones.
func TestKeyFromJMESPathKeysA1MiBBody(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"order_id":"o-1","lines":[`)
	for i := 0; b.Len() < 1<<20-200; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"sku":"sku-%06d","name":"Widget number %d","qty":%d,"price":12.5,"gift":false}`, i, i, i%7)
	}
	b.WriteString("]}")
	key, err := jmespathkey.KeyFromJMESPath("powertools_json(body).order_id")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key(&events.SQSMessage{Body: b.String()}); err != nil || got != "o-1" {
		t.Fatalf("got %q, %v; want o-1", got, err)
	}
}

// A gzip body of 5 KB inflates to 4 MiB of "0,": 2 million values, which
// took 1.2 s and 12.6 million allocations to decode. Decoding stops at
// MaxJSONValues, refusing the record for good.
func TestPowertoolsJSONStopsAtMaxJSONValues(t *testing.T) {
	key, err := jmespathkey.KeyFromJMESPath("powertools_json(powertools_base64_gzip(body)).order_id")
	if err != nil {
		t.Fatal(err)
	}
	msg := events.SQSMessage{Body: gzipBase64(t, "["+strings.Repeat("0,", jmespathkey.MaxGunzipBytes/2-2)+"0]")}
	var keyErr error
	allocs, _ := allocated(func() { _, keyErr = key(&msg) })
	if !errors.Is(keyErr, lambdakit.ErrInvalidKey) || !errors.Is(keyErr, jmespathkey.ErrTooCostly) {
		t.Errorf("got %v; want ErrInvalidKey and ErrTooCostly", keyErr)
	}
	// About 6 allocations a value decoded; 10 leaves a margin.
	if limit := uint64(10 * jmespathkey.MaxJSONValues); allocs > limit {
		t.Errorf("%d allocations; want at most %d", allocs, limit)
	}
}

// allocated runs f once and returns the allocations and bytes allocated
// meanwhile (no test of the package runs in parallel).
func allocated(f func()) (allocs, bytes uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, after.TotalAlloc - before.TotalAlloc
}

// The functions whose output a record can make far larger than itself (a
// width taken from the body, a replacement or separator repeated for every
// character) are refused before they build it: each of these asked for
// 64 MiB or more.
func TestFunctionsCannotBuildPastMaxFunctionBytes(t *testing.T) {
	big := strings.Repeat("a", 8<<10)
	tests := []struct{ name, expr, body string }{
		{"pad_left width", "pad_left('x', powertools_json(body).w)", `{"w":134217728}`},
		{"pad_right width", "pad_right('x', powertools_json(body).w)", `{"w":134217728}`},
		{"replace every character", "replace(body, '', body)", big},
		{"join separator", "join(body, split(body, ''))", big},
		{"split into characters", "split(body, '')", strings.Repeat("a", 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := jmespathkey.KeyFromJMESPath(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			msg := events.SQSMessage{Body: tt.body}
			_, bytes := allocated(func() { _, err = key(&msg) })
			if !errors.Is(err, lambdakit.ErrInvalidKey) || !errors.Is(err, jmespathkey.ErrTooCostly) {
				t.Errorf("got %v; want ErrInvalidKey and ErrTooCostly", err)
			}
			if n := bytes; n > 16<<20 {
				t.Errorf("allocated %d MiB; want at most 16", n>>20)
			}
		})
	}
}

// $ and let make a projection repeat the whole record once per element,
// so that the key's JSON text is the square of the record's size;
// Powertools' JMESPath has neither, and they are refused at start.
func TestKeyFromJMESPathRefusesReferencesBackToTheRecord(t *testing.T) {
	for _, expr := range []string{"powertools_json(body)[*].[$]", "let $r = @ in powertools_json(body)[*].[$r]"} {
		if _, err := jmespathkey.KeyFromJMESPath(expr); !errors.Is(err, jmespathkey.ErrExpression) {
			t.Errorf("%q: got %v, want ErrExpression", expr, err)
		}
	}
}

// No input makes a key or payload function panic.
func FuzzJMESPathKey(f *testing.F) {
	f.Add("powertools_json(body).[customer_id, order_id]", `{"customer_id":"c","order_id":1}`)
	f.Add("powertools_json(powertools_base64_gzip(body)).id", "H4sIAAAAAAAA/w==")
	f.Add("powertools_json(body).a", `[[[[[[[[1]]]]]]]]`)
	f.Add("powertools_json(body).a", `{"a":1e99999}`)
	f.Fuzz(func(t *testing.T, expr, body string) {
		key, err := jmespathkey.KeyFromJMESPath(expr)
		if err != nil {
			return
		}
		payload, _ := jmespathkey.PayloadFromJMESPath(expr)
		msg := events.SQSMessage{Body: body}
		_, _ = key(&msg)
		_, _ = payload(&msg)
	})
}

// Keys of expressions as Powertools users write them are the same bytes as
// before the per-record bounds (5114e89): a changed key would charge every
// message in flight across a deploy twice. The wants were printed by the
// code of 5114e89.
func TestKeyFromJMESPathKeysAreStable(t *testing.T) {
	order := `{"order_id":"ordre-é-42","customer_id":"客户-7","amount":12.50,"total":1.0,"neg":-0,"big":1e2,"tiny":0.1,` +
		`"emoji":"\ud83d\ude00","lone":"\ud800x","ctl":"a\u0000b<>&",` +
		`"lines":[{"sku":"b-2","qty":3},{"sku":"a-1","qty":1},{"sku":"c-3","qty":2}],"meta":{"z":1,"a":[1,2,{"b":"x"}],"Ü":"u"}}`
	tests := []struct{ expr, body, want string }{
		{"messageId", order, "m-1"},
		{"powertools_json(body).order_id", order, "ordre-é-42"},
		{"powertools_json(body).[customer_id, order_id]", order, `["客户-7","ordre-é-42"]`},
		{"powertools_json(body).{c: customer_id, o: order_id}", order, `{"c":"客户-7","o":"ordre-é-42"}`},
		{`messageAttributes."idempotency-key".stringValue`, order, "k-9"},
		{"messageAttributes.x.stringValue", order, "clé ✓"},
		{"powertools_json(powertools_base64(body)).order_id", base64.StdEncoding.EncodeToString([]byte(order)), "ordre-é-42"},
		{"powertools_json(powertools_base64_gzip(body)).[customer_id, order_id]", gzipBase64(t, order), `["客户-7","ordre-é-42"]`},
		{"powertools_json(body).[amount, total, neg, big, tiny]", order, "[12.5,1,-0,100,0.1]"},
		{"powertools_json(body).[emoji, lone, ctl]", order, `["😀","` + "\uFFFD" + `x","a\u0000b\u003c\u003e\u0026"]`},
		{"powertools_json(body).order_id", "{\"order_id\":\"o-\xff\xfe\"}", "o-\uFFFD\uFFFD"},
		{"[messageId, attributes.MessageGroupId, attributes.SentTimestamp]", order, `["m-1","g-1","1700000000000"]`},
		{"powertools_json(body).lines[?qty > `1`].sku", order, `["b-2","c-3"]`},
		{"sort_by(powertools_json(body).lines, &sku)[0].sku", order, "a-1"},
		{"join(',', sort(powertools_json(body).lines[*].sku))", order, "a-1,b-2,c-3"},
		{"to_string(powertools_json(body).meta)", order, `{"a":[1,2,{"b":"x"}],"z":1,"Ü":"u"}`},
		{"powertools_json(body).meta.a[]", order, `[1,2,{"b":"x"}]`},
		// Where JMESPath enumerates an object's members the key depended
		// on Go's map order before; members now come in name order.
		{"powertools_json(body).meta.*", order, `[[1,2,{"b":"x"}],1,"u"]`},
		{"keys(powertools_json(body).meta)", order, `["a","z","Ü"]`},
		{"values(powertools_json(body).meta)", order, `[[1,2,{"b":"x"}],1,"u"]`},
		{"items(powertools_json(body).meta)", order, `[["a",[1,2,{"b":"x"}]],["z",1],["Ü","u"]]`},
		{"messageAttributes.*.stringValue", order, `["k-9","clé ✓"]`},
		{"powertools_json(body).meta.*[0]", order, "[1]"},
	}
	for _, tt := range tests {
		key, err := jmespathkey.KeyFromJMESPath(tt.expr)
		if err != nil {
			t.Fatal(err)
		}
		msg := sqsRecord(tt.body)
		if got, err := key(&msg); err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.expr, got, err, tt.want)
		}
	}
}

// Every body SQS can carry (1 MiB at most) decodes within MaxJSONValues,
// even the densest: a list of one-digit readings holds a value every 2
// bytes. Such a body was keyed before the bound and must not become
// poison, sent to the DLQ on its first delivery.
func TestKeyFromJMESPathKeysA1MiBBodyOfSmallValues(t *testing.T) {
	const prefix, suffix = `{"order_id":"o-1","readings":[`, "0]}"
	body := prefix + strings.Repeat("0,", (1<<20-len(prefix)-len(suffix))/2) + suffix
	key, err := jmespathkey.KeyFromJMESPath("powertools_json(body).order_id")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key(&events.SQSMessage{Body: body}); err != nil || got != "o-1" {
		t.Fatalf("%d bytes: got %q, %v; want o-1", len(body), got, err)
	}
}

// The interpreter drops an error on the left of a filter, a flatten or a
// value projection and goes on with null, so a record past a bound there
// was no key (ErrNoKey: with ProcessWithoutKey the handler ran without
// idempotency) and a null payload. It is ErrTooCostly, as everywhere else.
func TestKeyFromJMESPathReportsTooCostlyUnderProjections(t *testing.T) {
	msg := events.SQSMessage{Body: strings.Repeat(",", 1<<19)} // split would build past 8 MiB
	for _, expr := range []string{"split(body, ',')[?@ != '']", "split(body, ',')[]", "split(body, ',').*"} {
		key, err := jmespathkey.KeyFromJMESPath(expr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := key(&msg); !errors.Is(err, lambdakit.ErrInvalidKey) || !errors.Is(err, jmespathkey.ErrTooCostly) {
			t.Errorf("key %s: got %v; want ErrInvalidKey and ErrTooCostly", expr, err)
		}
		payload, err := jmespathkey.PayloadFromJMESPath(expr)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := payload(&msg); !errors.Is(err, lambdakit.ErrDecode) || !errors.Is(err, jmespathkey.ErrTooCostly) {
			t.Errorf("payload %s: got %q, %v; want ErrDecode and ErrTooCostly", expr, p, err)
		}
	}
}

// Go ranges over a map in a random order, and JMESPath's .*, keys(),
// values() and items() enumerate an object's members: the same record gave
// another key on a redelivery (its duplicate handled twice) and another
// payload (a false ErrPayloadMismatch). Each must give one result.
func TestKeyFromJMESPathEnumeratesMembersInOneOrder(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 12 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"m%02d":%d`, (i*5)%12, i) // written out of name order
	}
	b.WriteString("}")
	msg := events.SQSMessage{Body: b.String()}
	for _, expr := range []string{"powertools_json(body).*", "keys(powertools_json(body))", "values(powertools_json(body))", "items(powertools_json(body))"} {
		key, err := jmespathkey.KeyFromJMESPath(expr)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := jmespathkey.PayloadFromJMESPath(expr)
		if err != nil {
			t.Fatal(err)
		}
		keys, payloads := map[string]bool{}, map[string]bool{}
		for range 50 {
			k, err := key(&msg)
			if err != nil {
				t.Fatal(err)
			}
			p, err := payload(&msg)
			if err != nil {
				t.Fatal(err)
			}
			keys[k], payloads[p] = true, true
		}
		if len(keys) != 1 || len(payloads) != 1 {
			t.Errorf("%s: %d keys and %d payloads from one record; want 1 each", expr, len(keys), len(payloads))
		}
	}
}
