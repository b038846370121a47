package producer_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// On a FIFO queue, messages of one Send that share an idempotency key share
// a deduplication ID, and SQS accepts all of them (the call succeeds, each
// entry gets a MessageId) but delivers only the first; Send must say which
// of them were not sent. moto 5.2 does the same (Queue.add_message skips a message whose
// dedup ID it holds from the last 5 minutes and still answers success), so
// these tests run against moto with no stand-in for SQS's answer.
func TestFIFOSameKeyInOneSend(t *testing.T) {
	client := sqsClient(t, "")
	// other is payment(id, group) for another amount.
	other := func(id, group string, amount int) producer.Message {
		return producer.Message{Body: fmt.Sprintf(`{"payment_id":%q,"customer_id":%q,"amount":%d}`, id, group, amount)}
	}

	for _, tc := range []struct {
		name string
		msgs []producer.Message
		opts func(*producer.Options)
		// delivered are the indices of the messages that must arrive.
		delivered []int
		// notSent are the errors of the messages left out, by index.
		notSent map[int]error
		// sendFails says Send's error must be ErrFailed, else nil.
		sendFails bool
	}{
		{
			name:      "a different payload under a key used earlier in the call",
			msgs:      []producer.Message{payment("pay_1", "cus_A"), other("pay_1", "cus_A", 200)},
			delivered: []int{0},
			notSent:   map[int]error{1: producer.ErrKeyConflict},
			sendFails: true,
		},
		{
			name:      "a different payload under a key used earlier in another group",
			msgs:      []producer.Message{payment("pay_1", "cus_A"), payment("pay_2", "cus_A"), payment("pay_1", "cus_B")},
			delivered: []int{0, 1},
			notSent:   map[int]error{2: producer.ErrKeyConflict},
			sendFails: true,
		},
		{
			name:      "the same message three times",
			msgs:      []producer.Message{payment("pay_1", "cus_A"), payment("pay_1", "cus_A"), payment("pay_1", "cus_A")},
			delivered: []int{0},
			notSent:   map[int]error{1: producer.ErrDuplicate, 2: producer.ErrDuplicate},
		},
		{
			name:      "the same payload in other JSON text",
			msgs:      []producer.Message{payment("pay_1", "cus_A"), {Body: `{ "amount": 1e2, "customer_id": "cus_A", "payment_id": "pay_1" }`}},
			delivered: []int{0},
			notSent:   map[int]error{1: producer.ErrDuplicate},
		},
		{
			name: "the consumer's PayloadFunc decides what is the same payload",
			msgs: []producer.Message{
				{Body: `{"payment_id":"pay_1","customer_id":"cus_A","amount":100,"sent_at":"10:00"}`},
				{Body: `{"payment_id":"pay_1","customer_id":"cus_A","amount":100,"sent_at":"10:01"}`},
				{Body: `{"payment_id":"pay_1","customer_id":"cus_A","amount":200,"sent_at":"10:02"}`},
			},
			opts:      func(o *producer.Options) { o.Payload = lambdakit.PayloadFields("amount") },
			delivered: []int{0},
			notSent:   map[int]error{1: producer.ErrDuplicate, 2: producer.ErrKeyConflict},
			sendFails: true,
		},
		{
			// Nor could the consumer compare them: not a duplicate.
			name: "payloads that cannot be compared",
			msgs: []producer.Message{payment("pay_1", "cus_A"), payment("pay_1", "cus_A")},
			opts: func(o *producer.Options) {
				o.Payload = func(*events.SQSMessage) (string, error) { return "", errors.New("no payload") }
			},
			delivered: []int{0},
			notSent:   map[int]error{1: producer.ErrKeyConflict},
			sendFails: true,
		},
		{
			// The refused message never reaches SQS, so its key is free.
			name:      "a key whose first message was refused",
			msgs:      []producer.Message{{Body: `{"payment_id":"pay_1","customer_id":"has space"}`}, payment("pay_1", "cus_A"), payment("pay_1", "cus_A")},
			delivered: []int{1},
			notSent:   map[int]error{0: producer.ErrInvalidGroupID, 2: producer.ErrDuplicate},
			sendFails: true,
		},
		{
			name:      "different keys",
			msgs:      []producer.Message{payment("pay_1", "cus_A"), payment("pay_2", "cus_A"), payment("pay_3", "cus_B")},
			delivered: []int{0, 1, 2},
		},
		{
			name: "a key repeated across batches",
			msgs: func() []producer.Message {
				var ms []producer.Message
				for i := range 11 {
					ms = append(ms, payment(fmt.Sprint("pay_", i), "cus_A"))
				}
				return append(ms, other("pay_0", "cus_A", 7))
			}(),
			delivered: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
			notSent:   map[int]error{11: producer.ErrKeyConflict},
			sendFails: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testenv.Queue(t, client, true, nil)
			opts := tc.opts
			if opts == nil {
				opts = func(*producer.Options) {}
			}
			p, err := producer.New(client, url, fifoOptions, opts)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Send(ctxFor(t), tc.msgs)
			if tc.sendFails != errors.Is(err, producer.ErrFailed) || (!tc.sendFails && err != nil) {
				t.Errorf("Send: %v; want ErrFailed: %v", err, tc.sendFails)
			}
			for i, r := range res {
				want, left := tc.notSent[i]
				switch {
				case !left && r.Err != nil:
					t.Errorf("message %d: %v; want sent", i, r.Err)
				case left && !errors.Is(r.Err, want):
					t.Errorf("message %d: %v; want %v", i, r.Err, want)
				case left && (r.Attempts != 0 || r.MessageID != ""):
					t.Errorf("message %d: %d attempts, message ID %q; want never sent", i, r.Attempts, r.MessageID)
				}
			}
			got := testenv.Drain(t, client, url)
			checkTruthful(t, tc.msgs, res, got)
			var want []string
			for _, i := range tc.delivered {
				want = append(want, tc.msgs[i].Body)
			}
			if !slices.Equal(bodies(got), want) {
				t.Errorf("received %q; want %q", bodies(got), want)
			}
		})
	}
}

// checkTruthful fails t unless the Results reported sent are exactly the
// messages received, each once.
func checkTruthful(t *testing.T, msgs []producer.Message, res []producer.Result, got []types.Message) {
	t.Helper()
	received := map[string]int{}
	for _, m := range got {
		received[aws.ToString(m.Body)]++
	}
	for i, r := range res {
		switch n := received[msgs[i].Body]; {
		case r.Sent() && n == 0:
			t.Errorf("message %d (key %s) is reported sent, but SQS did not deliver it", i, r.Key)
		case r.Sent():
			received[msgs[i].Body]--
		}
	}
	for body, n := range received {
		if n > 0 {
			t.Errorf("%s was delivered %d more times than reported sent", body, n)
		}
	}
}
