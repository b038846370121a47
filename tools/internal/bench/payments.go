package bench

import (
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Payments hands out payment messages of the sample's format, each with a
// payment_id never handed out before: prefix, then a sequence number.
type Payments struct {
	prefix string
	next   int
	size   int // bodies padded to this many bytes; 0: not padded
}

// NewPayments returns payments whose IDs start with prefix. Give each Impl
// its own prefix of the same length, so that their items have the same
// size and the gateway sees new keys from both.
func NewPayments(prefix string) *Payments { return &Payments{prefix: prefix} }

// Padded makes the bodies of the payments p hands out from now on size
// bytes long, about 1 KB for the batch-size rows, with a "note" field of
// filler: the payment function ignores fields it does not know, and its
// idempotency payload is only the payment's own fields. A size shorter
// than the payment leaves it unpadded. It returns p.
func (p *Payments) Padded(size int) *Payments {
	p.size = size
	return p
}

// Take returns n new payments, delivered for the first time from a
// standard queue.
func (p *Payments) Take(n int) []events.SQSMessage {
	msgs := make([]events.SQSMessage, n)
	for i := range msgs {
		p.next++
		body := fmt.Sprintf(`{"payment_id":"%s-%07d","order_id":"ord_%07d","customer_id":"cus_%05d","amount":%d,"currency":"EUR"}`,
			p.prefix, p.next, p.next, p.next%10000, 1000+p.next%9000)
		const note = `,"note":""`
		if fill := p.size - len(body) - len(note); fill > 0 {
			body = body[:len(body)-1] + `,"note":"` + strings.Repeat("x", fill) + `"}`
		}
		msgs[i] = lambdakittest.Message(body)
	}
	return msgs
}

// InBatches cuts msgs into batches of size.
func InBatches(msgs []events.SQSMessage, size int) [][]events.SQSMessage {
	var out [][]events.SQSMessage
	for len(msgs) > 0 {
		n := min(size, len(msgs))
		out = append(out, msgs[:n:n])
		msgs = msgs[n:]
	}
	return out
}

// Redelivered returns the batches as SQS delivers them again: the same
// messages, a new receipt handle, the receive count one higher.
func Redelivered(batches [][]events.SQSMessage) [][]events.SQSMessage {
	out := make([][]events.SQSMessage, len(batches))
	for i, b := range batches {
		out[i] = make([]events.SQSMessage, len(b))
		for j, m := range b {
			out[i][j] = lambdakittest.Redelivery(m)
		}
	}
	return out
}

// Mixed returns batches of size whose records alternate between new
// messages and redelivered old ones (half and half), as many batches as
// both allow.
func Mixed(fresh, old []events.SQSMessage, size int) [][]events.SQSMessage {
	var out [][]events.SQSMessage
	nOld := size / 2
	nNew := size - nOld
	for len(fresh) >= nNew && len(old) >= nOld {
		b := make([]events.SQSMessage, 0, size)
		for j := range size {
			if j%2 == 0 {
				b = append(b, fresh[0])
				fresh = fresh[1:]
			} else {
				b = append(b, lambdakittest.Redelivery(old[0]))
				old = old[1:]
			}
		}
		out = append(out, b)
	}
	return out
}
