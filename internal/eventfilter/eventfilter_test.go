package eventfilter_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/eventfilter"
)

// The cases follow "Control which events Lambda sends to your function"
// (invocation-eventfiltering), its filter rule syntax table and its
// sections on properties and on the body of SQS messages and the data of
// Kinesis records; each case names the clause it checks.
func TestMatchFollowsLambdaFilterRules(t *testing.T) {
	const record = `{"eventName":"INSERT","n":12,"price":10.5,"name":"Alice","empty":"","nothing":null,
		"ok":true,"tags":["red","blue"],"file":"photo.png","region":"us-east-1","none":[],"grid":[["x","y"],[{"cell":"z"}]],
		"items":[{"sku":"a","qty":1},{"sku":"b","qty":2,"wrap":true}],
		"dynamodb":{"NewImage":{"status":{"S":"completed"},"amount":{"N":"42"}}}}`
	cases := []struct {
		clause  string
		pattern string
		want    bool
	}{
		{"Equals: a string", `{"name":["Alice"]}`, true},
		{"Equals: another string", `{"name":["Bob"]}`, false},
		{"Equals: a number, compared as a number", `{"n":[12.0]}`, true},
		{"Equals: a boolean", `{"ok":[true]}`, true},
		{"Equals (ignore case)", `{"name":[{"equals-ignore-case":"ALICE"}]}`, true},
		{"Null: the field is null", `{"nothing":[null]}`, true},
		{"Null: a string is not null", `{"name":[null]}`, false},
		{"Empty: the field is an empty string", `{"empty":[""]}`, true},
		{"Empty: a missing field is not empty", `{"absent":[""]}`, false},
		{"And: every field must match", `{"name":["Alice"],"eventName":["INSERT"]}`, true},
		{"And: one field that does not match fails the pattern", `{"name":["Alice"],"eventName":["MODIFY"]}`, false},
		{"Or: one of a field's values", `{"eventName":["MODIFY","INSERT"]}`, true},
		{"Or (multiple fields): $or", `{"$or":[{"name":["Bob"]},{"n":[12]}]}`, true},
		{"Or (multiple fields): none of them", `{"$or":[{"name":["Bob"]},{"n":[13]}]}`, false},
		{"Not: anything-but a list", `{"name":[{"anything-but":["Bob","Carol"]}]}`, true},
		{"Not: anything-but the value itself", `{"name":[{"anything-but":"Alice"}]}`, false},
		{"Not: anything-but a number", `{"n":[{"anything-but":[12]}]}`, false},
		{"Not: anything-but does not match a missing field", `{"absent":[{"anything-but":["x"]}]}`, false},
		{"Numeric (equals)", `{"n":[{"numeric":["=",12]}]}`, true},
		{"Numeric (range)", `{"price":[{"numeric":[">",10,"<=",20]}]}`, true},
		{"Numeric (range): outside", `{"price":[{"numeric":[">",10.5,"<=",20]}]}`, false},
		{"Numeric: a string is not a number", `{"name":[{"numeric":[">",0]}]}`, false},
		{"Exists", `{"name":[{"exists":true}]}`, true},
		{"Exists: a missing field", `{"absent":[{"exists":true}]}`, false},
		{"Does not exist", `{"absent":[{"exists":false}]}`, true},
		{"Does not exist: a present field", `{"name":[{"exists":false}]}`, false},
		{"Does not exist: inside a missing object", `{"missing":{"deeper":[{"exists":false}]}}`, true},
		{"Begins with", `{"region":[{"prefix":"us-"}]}`, true},
		{"Begins with: not", `{"region":[{"prefix":"eu-"}]}`, false},
		{"Ends with", `{"file":[{"suffix":".png"}]}`, true},
		{"Ends with: not", `{"file":[{"suffix":".jpg"}]}`, false},
		{"An array in the record matches if one element does", `{"tags":["blue"]}`, true},
		{"An array in the record: no element", `{"tags":["green"]}`, false},
		{"DynamoDB: NewImage's typed values", `{"dynamodb":{"NewImage":{"status":{"S":["completed"]}}}}`, true},
		{"DynamoDB: N values are strings in the stream record", `{"dynamodb":{"NewImage":{"amount":{"N":["42"]}}}}`, true},
		{"DynamoDB: another value", `{"dynamodb":{"NewImage":{"status":{"S":["in_progress"]}}}}`, false},
		{"A nested pattern on a field that is not an object", `{"name":{"first":["Alice"]}}`, false},
		// event-ruler's README, "Exists matching": exists looks at leaves
		// only, so an object, or an array with no element, does not exist.
		{"Exists: an object is no leaf", `{"dynamodb":[{"exists":true}]}`, false},
		{"Does not exist: an object is no leaf", `{"dynamodb":[{"exists":false}]}`, true},
		{"Exists: an empty array has no leaf", `{"none":[{"exists":true}]}`, false},
		{"Does not exist: an empty array has no leaf", `{"none":[{"exists":false}]}`, true},
		// event-ruler's NameState.getNameTransitions: a field is absent only
		// if no array element consistent with the fields matched before it
		// (by path, in sorted order) has it, not if some element lacks it.
		{"Does not exist: one array element has the field", `{"items":{"wrap":[{"exists":false}]}}`, false},
		{"Does not exist: in the element the other fields matched", `{"items":{"sku":["a"],"wrap":[{"exists":false}]}}`, true},
		{"Does not exist: the element the other fields matched has it", `{"items":{"sku":["b"],"wrap":[{"exists":false}]}}`, false},
		{"Array consistency: fields from one element", `{"items":{"sku":["a"],"qty":[2]}}`, false},
		// ByteMachine.doTransitionOn: anything-but matches every leaf value
		// it does not list, null and booleans too.
		{"Not: anything-but matches null", `{"nothing":[{"anything-but":["x"]}]}`, true},
		{"Not: anything-but matches a boolean", `{"ok":[{"anything-but":[1]}]}`, true},
		// event-ruler's README, "JSON Array Matching": arrays inside arrays
		// are flattened as one.
		{"An array inside an array: its strings", `{"grid":["y"]}`, true},
		{"An array inside an array: its objects", `{"grid":{"cell":["z"]}}`, true},
	}
	for _, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			f, err := eventfilter.New(c.pattern)
			if err != nil {
				t.Fatal(err)
			}
			rec := decodeRecord(t, record, "", "")
			if got := f.Match(rec); got != c.want {
				t.Errorf("%s on the record: got %v; want %v", c.pattern, got, c.want)
			}
		})
	}
}

// decodeRecord is the JSON record as Match takes it, with payload at key.
func decodeRecord(t *testing.T, record, key, payload string) map[string]any {
	t.Helper()
	var v any = rawJSON(record)
	rec, err := eventfilter.Record(v, key, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// The table of "Filtering on the body / data" for SQS and Kinesis: a JSON
// pattern on a payload that is not JSON drops the record; a plain-string
// pattern compares the payload as it is.
func TestMatchPayloadAsLambdaFiltersBodyAndData(t *testing.T) {
	cases := []struct {
		clause  string
		pattern string
		payload string
		want    bool
	}{
		{"JSON pattern, JSON payload: filtered by the pattern", `{"body":{"type":["charge"]}}`, `{"type":"charge"}`, true},
		{"JSON pattern, JSON payload: another value", `{"body":{"type":["charge"]}}`, `{"type":"refund"}`, false},
		{"JSON pattern, plain-string payload: dropped", `{"body":{"type":["charge"]}}`, `type=charge`, false},
		{"plain-string pattern, plain-string payload", `{"body":["type=charge"]}`, `type=charge`, true},
		{"plain-string pattern, plain-string payload: prefix", `{"body":[{"prefix":"type="}]}`, `type=charge`, true},
		{"plain-string pattern, JSON payload: compared as a string", `{"body":[{"prefix":"{\"type\""}]}`, `{"type":"charge"}`, true},
		{"no pattern on the payload: the other fields decide", `{"eventSource":["aws:sqs"]}`, `not json`, true},
		{"JSON pattern on a JSON payload that is an array", `{"body":{"type":["charge"]}}`, `["charge"]`, false},
	}
	for _, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			f, err := eventfilter.New(c.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(decodeRecord(t, `{"eventSource":"aws:sqs","body":"ignored"}`, "body", c.payload)); got != c.want {
				t.Errorf("%s on body %s: got %v; want %v", c.pattern, c.payload, got, c.want)
			}
		})
	}
}

// Filters are ORed: a record passes when any one matches; with none,
// every record passes.
func TestMatchAnyFilter(t *testing.T) {
	rec := decodeRecord(t, `{"eventName":"REMOVE"}`, "", "")
	f, err := eventfilter.New(`{"eventName":["INSERT"]}`, `{"eventName":["REMOVE"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Match(rec) {
		t.Error("the second filter matches, but the record did not pass")
	}
	var none *eventfilter.Filter
	if !none.Match(rec) {
		t.Error("a nil Filter stopped a record; want every record through")
	}
}

func TestNewRefusesWhatItDoesNotImplement(t *testing.T) {
	many := make([]string, eventfilter.MaxFilters+1)
	for i := range many {
		many[i] = `{"a":["b"]}`
	}
	cases := []struct {
		name     string
		patterns []string
		want     error
	}{
		{"not JSON", []string{`{"a":`}, eventfilter.ErrInvalid},
		{"not an object", []string{`["a"]`}, eventfilter.ErrInvalid},
		{"a leaf that is not a list", []string{`{"a":"b"}`}, eventfilter.ErrInvalid},
		{"an empty list of rules", []string{`{"a":[]}`}, eventfilter.ErrUnsupported},
		{"wildcard", []string{`{"a":[{"wildcard":"*.png"}]}`}, eventfilter.ErrUnsupported},
		{"cidr", []string{`{"a":[{"cidr":"10.0.0.0/24"}]}`}, eventfilter.ErrUnsupported},
		{"prefix with equals-ignore-case", []string{`{"a":[{"prefix":{"equals-ignore-case":"x"}}]}`}, eventfilter.ErrUnsupported},
		{"anything-but strings and numbers mixed", []string{`{"a":[{"anything-but":["x",1]}]}`}, eventfilter.ErrInvalid},
		{"anything-but a prefix", []string{`{"a":[{"anything-but":{"prefix":"x"}}]}`}, eventfilter.ErrUnsupported},
		{"numeric with an unknown operator", []string{`{"a":[{"numeric":["!=",1]}]}`}, eventfilter.ErrInvalid},
		{"numeric range upside down", []string{`{"a":[{"numeric":["<",1,">",0]}]}`}, eventfilter.ErrInvalid},
		{"exists with a string", []string{`{"a":[{"exists":"yes"}]}`}, eventfilter.ErrInvalid},
		{"two operators in one rule", []string{`{"a":[{"prefix":"x","suffix":"y"}]}`}, eventfilter.ErrInvalid},
		{"more filters than Lambda takes", many, eventfilter.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := eventfilter.New(c.patterns...)
			var pe *eventfilter.PatternError
			if !errors.Is(err, c.want) || !errors.As(err, &pe) {
				t.Errorf("New(%q): got %v; want a PatternError that is %v", c.patterns, err, c.want)
			}
		})
	}
}

func TestParseCriteriaReadsTheTemplatesShape(t *testing.T) {
	got, err := eventfilter.ParseCriteria(`{"Filters":[{"Pattern":"{\"eventName\":[\"INSERT\"]}"},{"Pattern":"{\"a\":[1]}"}]}`)
	if err != nil || len(got) != 2 || got[0] != `{"eventName":["INSERT"]}` || got[1] != `{"a":[1]}` {
		t.Errorf("got %q, %v; want the two patterns", got, err)
	}
	for _, bad := range []string{`{"Filters":[{"Pattern":"x","Other":1}]}`, `{"Filters":[{}]}`, `[]`} {
		if _, err := eventfilter.ParseCriteria(bad); !errors.Is(err, eventfilter.ErrInvalid) {
			t.Errorf("ParseCriteria(%s): got %v; want ErrInvalid", bad, err)
		}
	}
}

// No pattern New takes, matched against any record and payload, panics or
// hangs: a filter runs on every record lambdakit run delivers.
func FuzzMatch(f *testing.F) {
	f.Add(`{"body":{"type":["charge"]}}`, `{"eventSource":"aws:sqs","body":"x"}`, `{"type":"charge"}`)
	f.Add(`{"body":[{"prefix":"type="}]}`, `{"eventSource":"aws:sqs"}`, `type=charge`)
	f.Add(`{"body":{"amount":[{"numeric":[">",0,"<=",5]}]}}`, `{"a":1}`, `{"amount":1e308}`)
	f.Add(`{"dynamodb":{"NewImage":{"status":{"S":[{"anything-but":["x"]}]}}}}`, `{"dynamodb":{"NewImage":{"status":{"S":"y"}}}}`, ``)
	f.Add(`{"body":{"a":[{"exists":false}],"b":[{"suffix":"z"}]}}`, `{}`, `{"a":null,"b":"xyz"}`)
	f.Fuzz(func(t *testing.T, pattern, record, payload string) {
		flt, err := eventfilter.New(pattern)
		if err != nil {
			return
		}
		var rec any
		if json.Unmarshal([]byte(record), &rec) != nil {
			return
		}
		m, err := eventfilter.Record(rec, "body", []byte(payload))
		if err != nil {
			return
		}
		flt.Match(m)
	})
}

// The relay's filter in template.yaml, on each kind of stream record the
// payments table produces, as Lambda would match it: only a completed
// record with at least one message that has a queue passes.
func TestMatchTemplateRelayFilter(t *testing.T) {
	tmpl, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(tmpl), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "- Pattern: '"); ok {
			patterns = append(patterns, strings.TrimSuffix(p, "'"))
		}
	}
	f, err := eventfilter.New(patterns...)
	if err != nil || f.Len() != 1 {
		t.Fatalf("the template's patterns %q: %v; want the relay's one", patterns, err)
	}
	const msg = `{"M":{"name":{"S":"payment.charged"},"queueUrl":{"S":"https://sqs.us-east-1.amazonaws.com/123456789012/events"},"body":{"S":"{}"}}}`
	const noQueue = `{"M":{"name":{"S":"payment.charged"},"body":{"S":"{}"}}}`
	image := func(status, messages string) string {
		img := `{"payment_id":{"S":"p1"},"record_status":{"S":"` + status + `"}`
		if messages != "" {
			img += `,"messages":` + messages
		}
		return img + `}`
	}
	cases := []struct {
		kind   string
		record string
		want   bool
	}{
		{"completion with several messages", `{"eventName":"INSERT","dynamodb":{"NewImage":` + image("COMPLETED", `{"L":[`+msg+`,`+msg+`]}`) + `}}`, true},
		{"completion where only some messages have a queue", `{"eventName":"MODIFY","dynamodb":{"NewImage":` + image("COMPLETED", `{"L":[`+noQueue+`,`+msg+`]}`) + `}}`, true},
		{"completion where no message has a queue", `{"eventName":"MODIFY","dynamodb":{"NewImage":` + image("COMPLETED", `{"L":[`+noQueue+`]}`) + `}}`, false},
		{"completion with an empty list", `{"eventName":"MODIFY","dynamodb":{"NewImage":` + image("COMPLETED", `{"L":[]}`) + `}}`, false},
		{"completion without messages", `{"eventName":"MODIFY","dynamodb":{"NewImage":` + image("COMPLETED", "") + `}}`, false},
		{"a queue that is NULL", `{"eventName":"MODIFY","dynamodb":{"NewImage":` + image("COMPLETED", `{"L":[{"M":{"queueUrl":{"NULL":true}}}]}`) + `}}`, false},
		{"lock (in progress)", `{"eventName":"INSERT","dynamodb":{"NewImage":` + image("INPROGRESS", `{"L":[`+msg+`]}`) + `}}`, false},
		{"MODIFY of an already completed record", `{"eventName":"MODIFY","dynamodb":{"OldImage":` + image("COMPLETED", `{"L":[`+msg+`]}`) + `,"NewImage":` + image("COMPLETED", `{"L":[`+msg+`]}`) + `}}`, true},
		{"TTL REMOVE", `{"eventName":"REMOVE","userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},"dynamodb":{"OldImage":` + image("COMPLETED", `{"L":[`+msg+`]}`) + `}}`, false},
	}
	for _, c := range cases {
		if got := f.Match(decodeRecord(t, c.record, "", "")); got != c.want {
			t.Errorf("%s: got %v; want %v", c.kind, got, c.want)
		}
	}
}
