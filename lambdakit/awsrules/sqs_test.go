package awsrules_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// punctuation is every punctuation mark SQS lists for IDs.
const punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// idCases are the clauses of SQS's rule for message group and
// deduplication IDs ("Amazon SQS message quotas", "Message group ID";
// the SendMessage API reference, "MessageDeduplicationId"): 1 to 128
// characters, alphanumeric and punctuation. moto 5.2.1 enforces none of
// it: these cases stand on the documentation alone.
var idCases = []struct {
	clause string
	id     string
	ok     bool
}{
	{"letters and digits", "cus42", true},
	{"every punctuation mark", punctuation, true},
	{"128 characters", strings.Repeat("g", 128), true},
	{"empty", "", false},
	{"129 characters", strings.Repeat("g", 129), false},
	{"a space", "cus 42", false},
	{"a letter outside ASCII", "cus_Zoë", false},
	{"a tab", "cus\t42", false},
	{"DEL", "cus\x7f", false},
}

func TestCheckGroupIDFollowsSQSsRule(t *testing.T) {
	for _, c := range idCases {
		t.Run(c.clause, func(t *testing.T) {
			verdict(t, fmt.Sprintf("CheckGroupID(%q)", c.id), awsrules.CheckGroupID(c.id), c.ok, awsrules.ErrGroupID)
		})
	}
}

func TestCheckDeduplicationIDFollowsSQSsRule(t *testing.T) {
	for _, c := range idCases {
		t.Run(c.clause, func(t *testing.T) {
			verdict(t, fmt.Sprintf("CheckDeduplicationID(%q)", c.id), awsrules.CheckDeduplicationID(c.id), c.ok, awsrules.ErrDeduplicationID)
		})
	}
}

// The SQS Developer Guide, "Amazon SQS message attributes", "Name": up to
// 256 characters of A-Z, a-z, 0-9, underscore, hyphen and period; case
// sensitive; not starting with AWS. or Amazon. (in any case); not
// starting or ending with a period; no consecutive periods. moto 5.2.1
// checks the characters only (moto: true): the other clauses stand on
// the documentation alone.
func TestCheckAttributeNameFollowsSQSsRule(t *testing.T) {
	cases := []struct {
		clause string
		name   string
		ok     bool
		moto   bool
	}{
		{"letters, digits, _ - and .", "Order_id-2.v1", true, true},
		{"256 characters", strings.Repeat("a", 256), true, true},
		{"case-sensitive: upper case is a name of its own", "TYPE", true, true},
		{"257 characters", strings.Repeat("a", 257), false, false},
		{"empty", "", false, false},
		{"a space", "a b", false, true},
		{"a letter outside ASCII", "é", false, true},
		{"a colon", "a:b", false, true},
		{"starts with AWS.", "AWS.trace", false, false},
		{"starts with aws. in other case", "aWs.trace", false, false},
		{"starts with Amazon.", "Amazon.x", false, false},
		{"starts with AMAZON. in other case", "AMAZON.x", false, false},
		{"AWS without its period is a name", "AWSx", true, true},
		{"starts with a period", ".a", false, false},
		{"ends with a period", "a.", false, false},
		{"two periods in a row", "a..b", false, false},
	}
	client := sqsClient(t)
	queue := testenv.Queue(t, client, false, nil)
	for _, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			err := awsrules.CheckAttributeName(c.name)
			verdict(t, fmt.Sprintf("CheckAttributeName(%q)", c.name), err, c.ok, awsrules.ErrAttributeName)
			if !c.moto {
				return
			}
			_, motoErr := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String("x"),
				MessageAttributes: map[string]types.MessageAttributeValue{c.name: {DataType: aws.String("String"), StringValue: aws.String("v")}}})
			agree(t, fmt.Sprintf("attribute name %q", c.name), err, motoErr)
		})
	}
}

// The SQS Developer Guide, "Amazon SQS message quotas", "Message
// content": #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000
// to #x10FFFF; any other character is rejected. moto 5.2.1 takes any
// body: the cases stand on the documentation alone.
func TestCheckTextFollowsSQSsCharacterRule(t *testing.T) {
	cases := []struct {
		clause string
		s      string
		ok     bool
	}{
		{"tab, line feed, carriage return", "\t\n\r", true},
		{"#x20 to #xD7FF", " ~é\u07ff\ud7ff", true},
		{"#xE000 to #xFFFD", "\ue000\ufffd", true},
		{"#x10000 to #x10FFFF", "\U00010000\U0010ffff", true},
		{"a control character below #x20", "a\x01", false},
		{"NUL", "a\x00", false},
		{"#xFFFE", "a\ufffe", false},
		{"#xFFFF", "a\uffff", false},
		{"a byte that is not UTF-8", "a\xff", false},
		{"a surrogate, encoded", "a\xed\xa0\x80", false},
	}
	for _, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			verdict(t, fmt.Sprintf("CheckText(%q)", c.s), awsrules.CheckText(c.s), c.ok, awsrules.ErrText)
		})
	}
}

// EscapeJSON makes a JSON body SQS would refuse into one it takes, with
// the same values, and leaves any other as it is.
func TestEscapeJSONKeepsTheValuesSQSWouldRefuse(t *testing.T) {
	for _, v := range []string{"ch_1", "ch_\ufffe\uffff", "ch_\ufffe<\u2028\U0001F600\x01"} {
		js, _ := json.Marshal(map[string]string{"charge_id": v})
		got := awsrules.EscapeJSON(string(js))
		var back map[string]string
		if err := awsrules.CheckText(got); err != nil || json.Unmarshal([]byte(got), &back) != nil || back["charge_id"] != v {
			t.Errorf("EscapeJSON(%s) = %s (%v); want a body SQS takes, with charge_id %q", js, got, err, v)
		}
		if awsrules.CheckText(string(js)) == nil && got != string(js) {
			t.Errorf("EscapeJSON(%s) = %s; want it unchanged", js, got)
		}
	}
}

// The SQS Developer Guide, "Amazon SQS message quotas", "Message size":
// 1 MiB (1,048,576 bytes), body and attributes together, since 2025. moto
// 5.2.1 enforces it on the body; the queue is created at the largest
// MaximumMessageSize.
func TestMaxMessageBytesIsSQSsOnMoto(t *testing.T) {
	client := sqsClient(t)
	queue := testenv.Queue(t, client, false, map[string]string{"MaximumMessageSize": fmt.Sprint(awsrules.MaxMessageBytes)})
	for _, c := range []struct {
		size int
		ok   bool
	}{{awsrules.MaxMessageBytes, true}, {awsrules.MaxMessageBytes + 1, false}} {
		_, err := client.SendMessage(ctxFor(t), &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(strings.Repeat("b", c.size))})
		if (err == nil) != c.ok {
			t.Errorf("a body of %d bytes: moto says %v; want ok=%v", c.size, err, c.ok)
		}
	}
}

// The SQS Developer Guide, "Amazon SQS message attributes", "Message
// attribute data types", Number: positive or negative, up to 38 digits
// of precision, between 10^-128 and 10^+126. moto 5.2.1 takes any text
// in a Number attribute: the cases stand on the documentation alone.
func TestCheckNumberAttributeFollowsSQSsNumberRule(t *testing.T) {
	cases := []struct {
		clause string
		s      string
		ok     bool
	}{
		{"an integer", "12", true},
		{"a negative decimal", "-12.50", true},
		{"zero", "0", true},
		{"38 digits of precision", "1" + strings.Repeat("2", 37), true},
		{"39 digits of precision", "1" + strings.Repeat("2", 38), false},
		{"10^-128", "1E-128", true},
		{"below 10^-128", "1E-129", false},
		{"below 10^+126", "9." + strings.Repeat("9", 37) + "E+125", true},
		{"10^+126", "1E+126", false},
		{"not a number", "twelve", false},
		{"empty", "", false},
	}
	for _, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			verdict(t, fmt.Sprintf("CheckNumberAttribute(%q)", c.s), awsrules.CheckNumberAttribute(c.s), c.ok, awsrules.ErrNumberAttribute)
		})
	}
}

// FuzzCheckTextReadsEachCharacterByTheRule checks CheckText, which reads
// ASCII a byte at a time, against the rule applied to each decoded
// character: the same verdict, and the same offset of the first bad byte.
func FuzzCheckTextReadsEachCharacterByTheRule(f *testing.F) {
	for _, s := range []string{"", "plain ascii {\"a\":1}", "\t\n\r\x7f", "a\x01", "\x00", "é\ufffe", "ok\xff", "\xed\xa0\x80", "\U0010ffff\x1f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := -1 // offset of the first bad byte
		for off := 0; off < len(s); {
			r, n := utf8.DecodeRuneInString(s[off:])
			if (r == utf8.RuneError && n == 1) || !(r == 0x9 || r == 0xA || r == 0xD || 0x20 <= r && r <= 0xD7FF || 0xE000 <= r && r <= 0xFFFD || 0x10000 <= r && r <= 0x10FFFF) {
				want = off
				break
			}
			off += n
		}
		err := awsrules.CheckText(s)
		switch {
		case want < 0 && err != nil:
			t.Fatalf("CheckText(%q) = %v; want nil", s, err)
		case want >= 0 && (!errors.Is(err, awsrules.ErrText) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d ", want))):
			t.Fatalf("CheckText(%q) = %v; want ErrText at byte %d", s, err, want)
		}
	})
}

// BenchmarkCheckText checks a payment.charged body, as an outbox does
// twice for every message it publishes.
func BenchmarkCheckText(b *testing.B) {
	body := `{"type":"payment.charged","payment_id":"pay_000000000401","order_id":"ord_1","customer_id":"cus_1","amount":1250,"currency":"EUR","charge_id":"ch_411"}`
	b.ReportAllocs()
	for b.Loop() {
		if awsrules.CheckText(body) != nil {
			b.Fatal("refused")
		}
	}
}
