package lambdakit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Fuzz targets. `make test` runs their seeds (f.Add and testdata/fuzz/<Name>);
// `make fuzz` runs each for FUZZTIME. FuzzKeyFromField is in keys_test.go.

// FuzzPayloadCanonical checks PayloadBody, the default payload of the
// idempotency check, against encoding/json: two bodies have the same
// payload exactly when encoding/json decodes them to the same value.
// Besides the two bodies it is given, it compares each with re-encodings of
// itself (other member order, escapes, spacing, number spellings), so that the "same value" side is well exercised.
//
// Values are compared as a decode into a struct sees them: numbers exactly
// by value (math/big), and every object member, in order among the members
// whose names differ only in case (the same name repeated included), since
// a struct decodes them in turn: {"a":1,"A":2} is not {"A":2,"a":1}, and
// {"a":1,"a":2} is not {"a":2}. Numbers whose exponent is beyond ±1000 are
// not compared (too costly to expand).
func FuzzPayloadCanonical(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1,"A":2}`, `{"A":2,"a":1}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"a":1,"b":{"c":[1,2]}}`, ` { "b" : { "c" : [ 1 , 2 ] } , "a" : 1 } `},
		{`1.0`, `1`},
		{`1e2`, `100`},
		{`-0`, `0.0e7`},
		{`0.5`, `5e-1`},
		{`123456789012345678901234567890`, `1.23456789012345678901234567890e29`},
		{`"\u00e9\ud83d\ude00"`, `"é😀"`},
		{`"\ud800"`, `"\ufffd"`},
		{"\"\xff\"", `"\ufffd"`},
		{`[1,2]`, `[2,1]`},
		{`{"k":1,"\u212a":2}`, `{"\u212a":2,"k":1}`},
		{`{"payment_id":"p-1","amount":1299,"currency":"EUR"}`, `{"currency":"EUR","amount":1.299e3,"payment_id":"p\u002d1"}`},
		{`not json`, `not json`},
		{`{"a":1`, `{"a":1}`},
		{`{"n":1e1000000000000}`, `{"n":1}`},
		{`""`, `null`},
		{`{}`, `[]`},
	} {
		f.Add(s[0], s[1], uint64(len(s[0])))
	}
	f.Fuzz(func(t *testing.T, a, b string, seed uint64) {
		checkPayloads(t, a, b)
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for _, body := range []string{a, b} {
			v, ok := parseJSONValue(body)
			if !ok {
				continue
			}
			checkPayloads(t, body, reencode(v, rng))
			checkPayloads(t, body, reencode(v, rng))
			if m, err := marshalDecoded(body); err == nil {
				checkPayloads(t, body, m)
			}
		}
	})
}

// checkPayloads checks that PayloadBody gives a and b the same payload
// exactly when encoding/json sees the same value in both.
func checkPayloads(t *testing.T, a, b string) {
	t.Helper()
	pa, oka := payloadOf(t, a)
	pb, okb := payloadOf(t, b)
	if !oka || !okb {
		return
	}
	va, vb := json.Valid([]byte(a)), json.Valid([]byte(b))
	var want bool
	switch {
	case !va && !vb:
		want = a == b // compared byte for byte
	case va != vb:
		want = false
	default:
		x, _ := parseJSONValue(a)
		y, _ := parseJSONValue(b)
		eq, known := sameJSONValue(x, y)
		if !known {
			return
		}
		want = eq
	}
	if got := pa == pb; got != want {
		t.Fatalf("PayloadBody(%q) == PayloadBody(%q): got %t; want %t (as encoding/json decodes them)", a, b, got, want)
	}
}

// payloadOf returns PayloadBody of body and whether it is to be compared.
// It fails t if PayloadBody and json.Valid disagree on whether body is
// JSON, or if PayloadBody refuses a body whose numbers are ordinary.
func payloadOf(t *testing.T, body string) (string, bool) {
	t.Helper()
	msg := lambdakittest.Message(body)
	p, err := lambdakit.PayloadBody(&msg)
	valid := json.Valid([]byte(body))
	if err != nil {
		if v, ok := parseJSONValue(body); ok && hugeExponent(v) {
			return "", false // refused: an exponent beyond a billion
		}
		t.Fatalf("PayloadBody(%q): %v; want a payload", body, err)
	}
	if raw := p != "" && p[0] == 'r'; raw == valid {
		t.Fatalf("PayloadBody(%q) = %q: compared as text %t, but json.Valid says %t", body, p, raw, valid)
	}
	return p, true
}

// jsonValue is a JSON value as encoding/json's Decoder.Token reads it, with
// the members of objects in their order, duplicates included.
type jsonValue struct {
	kind  byte        // 'n' null, 'b' bool, 'd' number, 's' string, '[' array, '{' object
	text  string      // a string's value, a number as written, "true" or "false"
	elems []jsonValue // array elements, or object member values
	names []string    // object member names, aligned with elems
}

// parseJSONValue decodes body with encoding/json; ok is false when body is
// not one valid JSON value.
func parseJSONValue(body string) (jsonValue, bool) {
	if !json.Valid([]byte(body)) {
		return jsonValue{}, false
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	v, err := readJSONValue(dec)
	return v, err == nil
}

func readJSONValue(dec *json.Decoder) (jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return jsonValue{}, err
	}
	switch t := tok.(type) {
	case nil:
		return jsonValue{kind: 'n'}, nil
	case bool:
		return jsonValue{kind: 'b', text: strconv.FormatBool(t)}, nil
	case json.Number:
		return jsonValue{kind: 'd', text: string(t)}, nil
	case string:
		return jsonValue{kind: 's', text: t}, nil
	case json.Delim:
		v := jsonValue{kind: byte(t)}
		for dec.More() {
			if t == '{' {
				name, err := dec.Token()
				if err != nil {
					return v, err
				}
				v.names = append(v.names, name.(string))
			}
			e, err := readJSONValue(dec)
			if err != nil {
				return v, err
			}
			v.elems = append(v.elems, e)
		}
		_, err := dec.Token() // the closing delimiter
		return v, err
	}
	return jsonValue{}, fmt.Errorf("unexpected token %v", tok)
}

// sameJSONValue compares two decoded values; known is false when a number
// with an exponent beyond ±1000 is in either.
func sameJSONValue(x, y jsonValue) (equal, known bool) {
	if hugeExponent(x) || hugeExponent(y) {
		return false, false
	}
	return sameValue(x, y), true
}

func sameValue(x, y jsonValue) bool {
	if x.kind != y.kind {
		return false
	}
	switch x.kind {
	case 'd':
		rx, _ := new(big.Rat).SetString(x.text)
		ry, _ := new(big.Rat).SetString(y.text)
		return rx.Cmp(ry) == 0
	case '[':
		return slices.EqualFunc(x.elems, y.elems, sameValue)
	case '{':
		// Every member counts, in order among those whose names differ
		// only in case (the exact same name included): a struct decodes
		// them in turn. Other members may come in any order.
		if len(x.names) != len(y.names) {
			return false
		}
		for _, n := range x.names {
			gx, gy := foldGroup(x, n), foldGroup(y, n)
			if len(gx) != len(gy) {
				return false
			}
			for k := range gx {
				if x.names[gx[k]] != y.names[gy[k]] || !sameValue(x.elems[gx[k]], y.elems[gy[k]]) {
					return false
				}
			}
		}
		return true
	default:
		return x.text == y.text
	}
}

// foldGroup returns the positions, in order, of v's members whose names
// equal name but for case.
func foldGroup(v jsonValue, name string) []int {
	var out []int
	for i, n := range v.names {
		if strings.EqualFold(n, name) {
			out = append(out, i)
		}
	}
	return out
}

// hugeExponent reports whether v holds a number whose exponent is beyond
// ±1000.
func hugeExponent(v jsonValue) bool {
	if v.kind == 'd' {
		i := strings.IndexAny(v.text, "eE")
		if i < 0 {
			return false
		}
		e, err := strconv.Atoi(strings.TrimPrefix(v.text[i+1:], "+"))
		return err != nil || e > 1000 || e < -1000
	}
	return slices.ContainsFunc(v.elems, hugeExponent)
}

// reencode writes v again as another encoder might: other spacing, other
// escapes, other number spellings, members in another order (names that
// differ only in case keep theirs), and now and then a member written
// twice, the first time with another value, which the last one overrides.
func reencode(v jsonValue, rng *rand.Rand) string {
	var b strings.Builder
	writeValue(&b, v, rng)
	space(&b, rng)
	return b.String()
}

func space(b *strings.Builder, rng *rand.Rand) {
	for range rng.IntN(3) {
		b.WriteByte(" \t\n\r"[rng.IntN(4)])
	}
}

func writeValue(b *strings.Builder, v jsonValue, rng *rand.Rand) {
	space(b, rng)
	switch v.kind {
	case 'n':
		b.WriteString("null")
	case 'b':
		b.WriteString(v.text)
	case 'd':
		b.WriteString(respell(v.text, rng))
	case 's':
		writeString(b, v.text, rng)
	case '[':
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				space(b, rng)
				b.WriteByte(',')
			}
			writeValue(b, e, rng)
		}
		space(b, rng)
		b.WriteByte(']')
	case '{':
		// Members in a random order in which each group of names that
		// differ only in case (the same name repeated included) keeps
		// its own order: a struct decodes a group's members in turn.
		var groups [][]int
		for i, n := range v.names {
			k := slices.IndexFunc(groups, func(g []int) bool { return strings.EqualFold(v.names[g[0]], n) })
			if k < 0 {
				groups = append(groups, nil)
				k = len(groups) - 1
			}
			groups[k] = append(groups[k], i)
		}
		rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
		b.WriteByte('{')
		first := true
		for _, g := range groups {
			for _, i := range g {
				if !first {
					space(b, rng)
					b.WriteByte(',')
				}
				first = false
				space(b, rng)
				writeString(b, v.names[i], rng)
				space(b, rng)
				b.WriteByte(':')
				writeValue(b, v.elems[i], rng)
			}
		}
		space(b, rng)
		b.WriteByte('}')
	}
}

// writeString writes s as a JSON string, each character as itself or
// escaped in one of the ways JSON allows.
func writeString(b *strings.Builder, s string, rng *rand.Rand) {
	b.WriteByte('"')
	for _, r := range s {
		short := map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]
		mustEscape := r < 0x20 || r == '"' || r == '\\'
		switch choice := rng.IntN(4); {
		case short != "" && (choice == 0 || mustEscape && choice < 2):
			b.WriteString(short)
		case mustEscape || choice == 1:
			if r > 0xFFFF {
				r1, r2 := utf16Pair(r)
				fmt.Fprintf(b, `\u%04x\u%04X`, r1, r2)
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

// respell writes the JSON number text by the same value, in another
// spelling: the decimal point moved against the exponent, trailing zeros
// added, 'e' or 'E', with or without '+'.
func respell(text string, rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		return text
	}
	neg := strings.HasPrefix(text, "-")
	text = strings.TrimPrefix(text, "-")
	mant, exp := text, 0
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(text[i+1:], "+"))
		if err != nil || e > 1000 || e < -1000 {
			return map[bool]string{true: "-", false: ""}[neg] + text
		}
		mant, exp = text[:i], e
	}
	digits := mant
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		digits = mant[:i] + mant[i+1:]
		exp -= len(mant) - i - 1
	}
	digits = strings.TrimLeft(digits, "0")
	// value = digits × 10^exp
	var out strings.Builder
	if neg {
		out.WriteByte('-')
	}
	if digits == "" {
		out.WriteString([]string{"0", "0.0", "0e7", "0.000E-2"}[rng.IntN(4)])
		return out.String()
	}
	zeros := rng.IntN(3)
	digits += strings.Repeat("0", zeros)
	exp -= zeros
	p := rng.IntN(len(digits) + 1) // digits before the point; 0 means "0."
	if p == 0 {
		out.WriteString("0." + digits)
	} else {
		out.WriteString(digits[:p])
		if p < len(digits) {
			out.WriteString("." + digits[p:])
		}
	}
	if e := exp + len(digits) - p; e != 0 || rng.IntN(2) == 0 {
		out.WriteString([]string{"e", "E", "e+", "E+"}[rng.IntN(4)])
		out.WriteString(strconv.Itoa(e))
	}
	return out.String()
}

// marshalDecoded decodes body into a Go value and encodes it again with
// json.Marshal: members sorted by name, HTML characters escaped.
func marshalDecoded(body string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// FuzzBatch runs arbitrary events through Batch and Idempotent on a
// MemoryStore, with handlers that succeed, fail, panic or call
// runtime.Goexit depending on the body, and checks what must always hold:
// no panic escapes; the response names only message IDs of the event,
// never an empty one, each once; every record either succeeded or is
// reported failed (or, without a message ID, fails the whole batch); the
// batch error is the one documented; no lock is left in progress once the
// batch has answered; and no key's work succeeds twice.
//
// The input is either the JSON of an events.SQSEvent, or bytes from which
// an event is built (see buildEvent).
func FuzzBatch(f *testing.F) {
	f.Add([]byte(`{"Records":[{"messageId":"m1","body":"{\"k\":\"a\"}"},{"messageId":"m1","body":"{\"k\":\"a\"}"}]}`))
	f.Add([]byte(`{"Records":null}`))
	f.Add([]byte(`{"Records":[{"body":"{\"k\":\"a\",\"do\":\"fail\"}"},{"messageId":"m2","body":"x"}]}`))
	f.Add([]byte{0x3f, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Fuzz(func(t *testing.T, data []byte) {
		event, o := buildEvent(data)
		runFuzzBatch(t, event, o)
	})
}

// fuzzOptions are the settings one input chooses.
type fuzzOptions struct {
	processWithoutKey, cache, strictFIFO, oneAtATime, allowAllFailed, payloadField bool
}

func optionsFrom(b byte) fuzzOptions {
	return fuzzOptions{b&1 != 0, b&2 != 0, b&4 != 0, b&8 != 0, b&16 != 0, b&32 != 0}
}

// buildEvent reads an event from data: the JSON of an SQSEvent (options from
// its hash), or else a recipe. A recipe's first byte holds the options, the
// second the number of records (up to 12); then each record takes a byte of
// flags (message ID: empty, one of three shared, or unique; FIFO group;
// body: a template with one of three keys and an action, or raw bytes)
// and, for a raw body, a length and that many bytes.
func buildEvent(data []byte) (events.SQSEvent, fuzzOptions) {
	var event events.SQSEvent
	if json.Unmarshal(data, &event) == nil {
		h := fnv.New32a()
		h.Write(data)
		if len(event.Records) > 64 {
			event.Records = event.Records[:64]
		}
		return event, optionsFrom(byte(h.Sum32()))
	}
	i := 0
	next := func() byte {
		if i >= len(data) {
			return 0
		}
		i++
		return data[i-1]
	}
	o := optionsFrom(next())
	n := int(next() % 13)
	for r := range n {
		flags := next()
		msg := lambdakittest.Message("")
		switch flags & 3 {
		case 0:
			msg.MessageId = ""
		case 1, 2:
			msg.MessageId = fmt.Sprintf("shared-%d", flags>>6)
		default:
			msg.MessageId = fmt.Sprintf("unique-%d", r)
		}
		if flags&4 != 0 {
			lambdakittest.InGroup([]string{"g1", "g2"}[flags>>7])(&msg)
		}
		if flags&8 != 0 {
			size := int(next())
			end := min(i+size, len(data))
			msg.Body = string(data[i:end])
			i = end
		} else {
			action := []string{"ok", "ok", "fail", "panic", "exit", "ok", "big", "ok"}[(flags>>4)&7]
			msg.Body = fmt.Sprintf(`{"k":"%c","do":%q,"v":%d}`, 'a'+rune(flags>>6)%3, action, next()%2)
		}
		event.Records = append(event.Records, msg)
	}
	return event, o
}

// fuzzHandler acts on a body's "do" field (fail, panic, exit, big), or, for
// a body without one, on its hash; it counts successes by key.
type fuzzHandler struct {
	key lambdakit.KeyFunc
	mu  sync.Mutex
	ok  map[string]int
}

func (h *fuzzHandler) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	var in struct {
		Do string `json:"do"`
	}
	if json.Unmarshal([]byte(msg.Body), &in) != nil || in.Do == "" {
		hash := fnv.New32a()
		hash.Write([]byte(msg.Body))
		in.Do = []string{"ok", "ok", "ok", "fail", "panic", "ok", "ok", "exit"}[hash.Sum32()%8]
	}
	switch in.Do {
	case "fail":
		return nil, errors.New("fuzz: asked to fail")
	case "panic":
		panic("fuzz: asked to panic")
	case "exit":
		runtime.Goexit()
	}
	if key, err := h.key(msg); err == nil {
		h.mu.Lock()
		h.ok[key]++
		h.mu.Unlock()
	}
	if in.Do == "big" {
		return bytes.Repeat([]byte("x"), 1<<16), nil
	}
	return []byte(`"done"`), nil
}

func runFuzzBatch(t *testing.T, event events.SQSEvent, o fuzzOptions) {
	store := &lambdakittest.MemoryStore{}
	key := lambdakit.KeyFromField("k")
	inner := &fuzzHandler{key: key, ok: map[string]int{}}
	idem := lambdakit.Idempotent(store, key, func(io *lambdakit.Options) {
		io.Logger = silentLogger()
		io.ProcessWithoutKey = o.processWithoutKey
		if o.cache {
			io.CacheSize = 4
		}
		if o.payloadField {
			io.Payload = lambdakit.PayloadFields("v")
		}
	})
	// outcome watches what the middleware returned for each record, by
	// its index in the event.
	var mu sync.Mutex
	outcome := map[int]error{}
	watch := lambdakit.Middleware(func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			out, err := next.Handle(ctx, msg)
			for i := range event.Records {
				if &event.Records[i] == msg {
					mu.Lock()
					outcome[i] = err
					mu.Unlock()
				}
			}
			return out, err
		})
	})
	batch := lambdakit.Batch(lambdakit.Chain(inner, watch, idem), func(bo *lambdakit.BatchOptions) {
		bo.Logger = silentLogger()
		bo.FIFOStopOnFirstFailure = o.strictFIFO
		bo.AllowAllFailed = o.allowAllFailed
		if o.oneAtATime {
			bo.Concurrency = 1
		}
	})
	resp, err := batch(context.Background(), event)

	ids := map[string]bool{}
	for _, r := range event.Records {
		ids[r.MessageId] = true
	}
	reported := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		switch {
		case f.ItemIdentifier == "":
			t.Fatalf("got an empty itemIdentifier in %+v", resp)
		case !ids[f.ItemIdentifier]:
			t.Fatalf("got itemIdentifier %q, which is no record's", f.ItemIdentifier)
		case reported[f.ItemIdentifier]:
			t.Fatalf("got itemIdentifier %q twice", f.ItemIdentifier)
		}
		reported[f.ItemIdentifier] = true
	}
	if resp.BatchItemFailures == nil {
		t.Fatal("got a null batchItemFailures; want a list")
	}
	failed, missing, failedIDs := 0, 0, map[string]bool{}
	for i, r := range event.Records {
		err, returned := outcome[i]
		if returned && err == nil {
			continue // succeeded
		}
		failed++
		failedIDs[r.MessageId] = true
		if r.MessageId == "" {
			missing++
		} else if !reported[r.MessageId] {
			t.Fatalf("record %d (%q) failed (%v, returned %t) but was not reported", i, r.MessageId, err, returned)
		}
	}
	for id := range reported {
		if !failedIDs[id] {
			t.Fatalf("itemIdentifier %q reported, but every record with that ID succeeded", id)
		}
	}
	switch {
	case missing > 0:
		if !errors.Is(err, lambdakit.ErrMissingMessageID) {
			t.Fatalf("a failed record has no message ID: got %v; want ErrMissingMessageID", err)
		}
	case failed > 0 && failed == len(event.Records) && !o.allowAllFailed:
		if !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Fatalf("every record failed: got %v; want ErrAllFailed", err)
		}
	case err != nil:
		t.Fatalf("got batch error %v with %d of %d records failed", err, failed, len(event.Records))
	}
	for id, rec := range store.Records() {
		if rec.Status != lambdakit.StatusCompleted {
			t.Fatalf("record %s left %s after the batch answered", id, rec.Status)
		}
	}
	for k, n := range inner.ok {
		if n > 1 {
			t.Fatalf("key %q: the handler succeeded %d times; want at most once", k, n)
		}
	}
}
