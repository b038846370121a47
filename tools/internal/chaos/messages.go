package chaos

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
)

// queueARN is the event source ARN of every record: a FIFO queue named as
// template.yaml names it, so that the function keeps message groups in
// order.
const queueARN = "arn:aws:sqs:us-east-1:123456789012:lambdakit-payment-queue.fifo"

// payment is one unique payment of the run, in the sample's message
// format.
type payment struct {
	ID         string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

func (p payment) declined() bool {
	return strings.HasPrefix(p.CustomerID, gateway.DeclinedCustomerPrefix)
}

// newPayments makes n payments: about eight per customer (the FIFO message
// group), a fraction declined of them for customers whose cards the
// sandbox declines, and one order in five with an '&' in its ID, which
// encoders disagree on (encoding/json writes \u0026).
func newPayments(n int, declined float64, rng *rand.Rand) []payment {
	customers := max(1, n/8)
	currencies := []string{"EUR", "USD", "GBP"}
	ps := make([]payment, n)
	for i := range ps {
		c := rng.IntN(customers)
		customer := fmt.Sprintf("cus_%04d", c)
		if rng.Float64() < declined {
			customer = fmt.Sprintf("%s_%04d", gateway.DeclinedCustomerPrefix, c)
		}
		order := fmt.Sprintf("ord_%05d", i)
		if rng.IntN(5) == 0 {
			order += "&gift"
		}
		ps[i] = payment{
			ID:         fmt.Sprintf("pay_%05d", i),
			OrderID:    order,
			CustomerID: customer,
			Amount:     100 + rng.Int64N(99_900),
			Currency:   currencies[rng.IntN(len(currencies))],
		}
	}
	return ps
}

// canonicalBody is the body as the producer writes it, with encoding/json.
func canonicalBody(p payment) string {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and an integer always encode
	}
	return string(b)
}

// member is one name and value of a payment body, the value already in
// canonical (encoding/json) form for comparison.
type member struct {
	name      string
	str       string // for strings
	num       int64  // for the amount
	isNum     bool
	canonical string // encoding/json's text of the value
}

func members(p payment) []member {
	ms := []member{
		{name: "payment_id", str: p.ID},
		{name: "order_id", str: p.OrderID},
		{name: "customer_id", str: p.CustomerID},
		{name: "amount", num: p.Amount, isNum: true},
		{name: "currency", str: p.Currency},
	}
	for i := range ms {
		if ms[i].isNum {
			ms[i].canonical = strconv.FormatInt(ms[i].num, 10)
		} else {
			b, _ := json.Marshal(ms[i].str)
			ms[i].canonical = string(b)
		}
	}
	return ms
}

// reencode writes p the way another JSON encoder might: members in another
// order, other spacing (compact, Python's default separators, indented,
// spaced), strings with or without \u escapes (for '_', '&' and one
// letter, in upper- or lower-case hex), and sometimes a field the payment
// does not define (a send time, which differs between a producer's
// retries). The result decodes to the same payment. valuesDiffer reports
// whether the raw text of a payment field differs from the canonical
// body's: a comparison of raw field text takes such a copy for another
// payload, one of canonical values does not.
func reencode(p payment, rng *rand.Rand, sent time.Time) (body string, valuesDiffer bool) {
	ms := members(p)
	rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	if rng.IntN(2) == 0 {
		ms = append(ms, member{name: "sent_at", str: sent.UTC().Format(time.RFC3339Nano)})
	}
	escape := func(byte) bool { return false }
	if rng.IntN(2) == 0 {
		letter := "aeiou"[rng.IntN(5)]
		escape = func(c byte) bool { return c == '_' || c == '&' || c == letter }
	}
	upper := rng.IntN(2) == 0
	var comma, colon, open, end string
	switch rng.IntN(4) {
	case 0: // compact, but not encoding/json's escaping
		comma, colon, open, end = ",", ":", "{", "}"
	case 1: // Python's json.dumps defaults
		comma, colon, open, end = ", ", ": ", "{", "}"
	case 2: // indented
		comma, colon, open, end = ",\n  ", ": ", "{\n  ", "\n}"
	default: // spaced
		comma, colon, open, end = " , ", " : ", "{ ", " }"
	}
	var b strings.Builder
	b.WriteString(open)
	for i, m := range ms {
		if i > 0 {
			b.WriteString(comma)
		}
		writeJSONString(&b, m.name, func(byte) bool { return false }, upper)
		b.WriteString(colon)
		if m.isNum {
			b.WriteString(strconv.FormatInt(m.num, 10))
			continue
		}
		start := b.Len()
		writeJSONString(&b, m.str, escape, upper)
		if m.canonical != "" && b.String()[start:] != m.canonical {
			valuesDiffer = true
		}
	}
	b.WriteString(end)
	return b.String(), valuesDiffer
}

// writeJSONString writes s as a JSON string, escaping what JSON requires
// and the bytes escape picks, as \u00XX.
func writeJSONString(b *strings.Builder, s string, escape func(byte) bool, upperHex bool) {
	format := "\\u%04x"
	if upperHex {
		format = "\\u%04X"
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c < 0x20 || escape(c):
			fmt.Fprintf(b, format, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// sqsRecord is m as Lambda hands it to the function on this receive.
func sqsRecord(m *message) events.SQSMessage {
	sum := md5.Sum([]byte(m.body))
	return events.SQSMessage{
		MessageId:     m.id,
		ReceiptHandle: fmt.Sprintf("%s-r%d", m.id, m.receives),
		Body:          m.body,
		Md5OfBody:     hex.EncodeToString(sum[:]),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
			"SenderId":                         "AIDAIENQZJOLO23YVJ4VO",
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
			"SequenceNumber":                   fmt.Sprintf("188865478531%08d", m.seq), // 20 digits, as SQS writes them
			"MessageGroupId":                   m.group,
			"MessageDeduplicationId":           m.dedupID,
		},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs",
		EventSourceARN:    queueARN,
		AWSRegion:         "us-east-1",
	}
}
