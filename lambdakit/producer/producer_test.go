package producer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

func TestDedupIDIsStable(t *testing.T) {
	// Fixed here, so that a change of the derivation, which would make
	// producers of two versions disagree, fails the test.
	const want = "5c80cc3ffddd9828ddf1fb1e0c794d81713dfb2cebd32ed7a16893d021acb910"
	if got := producer.DedupID("pay_1001"); got != want {
		t.Errorf("DedupID(pay_1001) = %s; want %s, the hex SHA-256 of the key", got, want)
	}
	if a, b := producer.DedupID("pay_1"), producer.DedupID("pay_2"); a == b {
		t.Errorf("DedupID gives %s for two keys; want distinct IDs", a)
	}
	id := producer.DedupID(strings.Repeat("k", 10000))
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("DedupID of a long key = %q; want 64 hex digits", id)
	}
}

// The dedup ID of a message is its idempotency record's ID without the
// prefix: checked against what the middleware actually stores, for a
// message that went through SQS.
func TestDedupIDIsTheRecordIDWithoutItsPrefix(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, true, nil)
	p, err := producer.New(client, url, fifoOptions)
	if err != nil {
		t.Fatal(err)
	}
	res := mustSend(t, p, payment("pay_1001", "cus_A"), payment("pay_1002", "cus_B"))
	store := &lambdakittest.MemoryStore{}
	h := lambdakit.Idempotent(store, lambdakitKey, func(o *lambdakit.Options) { o.Prefix = "payment" })(
		lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil }))
	got := testenv.Drain(t, client, url)
	if len(got) != 2 {
		t.Fatalf("received %d messages; want 2", len(got))
	}
	for i, m := range got {
		if _, err := h.Handle(ctxFor(t), asEvent(m, "arn:aws:sqs:us-east-1:123456789012:q.fifo")); err != nil {
			t.Fatal(err)
		}
		dedup := m.Attributes["MessageDeduplicationId"]
		if dedup != res[i].DedupID {
			t.Errorf("message %d arrived with MessageDeduplicationId %q; want %q, the Result's", i, dedup, res[i].DedupID)
		}
		if _, ok := store.Records()["payment#"+dedup]; !ok {
			t.Errorf("no record payment#%s for the message with that dedup ID; records: %v", dedup, slices.Collect(mapKeys(store.Records())))
		}
	}
	if n := len(store.Records()); n != 2 {
		t.Errorf("%d records; want 2", n)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestFIFO(t *testing.T) {
	client := sqsClient(t, "")

	t.Run("same key twice is received once", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		first := mustSend(t, p, payment("pay_1", "cus_A"))
		// A producer's retry: a new call, another process for all SQS knows.
		again := mustSend(t, p, payment("pay_1", "cus_A"))
		if first[0].DedupID != again[0].DedupID || first[0].DedupID != producer.DedupID("pay_1") {
			t.Errorf("dedup IDs %q and %q; want DedupID(pay_1) both times", first[0].DedupID, again[0].DedupID)
		}
		if got := testenv.Drain(t, client, url); len(got) != 1 {
			t.Errorf("received %d messages %q; want 1", len(got), bodies(got))
		}
	})

	t.Run("different keys are not deduplicated", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		mustSend(t, p, payment("pay_1", "cus_A"), payment("pay_2", "cus_A"))
		if got := testenv.Drain(t, client, url); len(got) != 2 {
			t.Errorf("received %d messages %q; want 2", len(got), bodies(got))
		}
	})

	t.Run("group IDs come from the field", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		res := mustSend(t, p, payment("pay_1", "cus_A"), payment("pay_2", "cus_B"), payment("pay_3", "cus_A"))
		got := testenv.Drain(t, client, url)
		groups := map[string]string{}
		for _, m := range got {
			groups[aws.ToString(m.Body)] = m.Attributes["MessageGroupId"]
		}
		for i, want := range []string{"cus_A", "cus_B", "cus_A"} {
			if res[i].GroupID != want || groups[payment(fmt.Sprint("pay_", i+1), want).Body] != want {
				t.Errorf("message %d: Result group %q, received in group %q; want %s", i, res[i].GroupID, groups[payment(fmt.Sprint("pay_", i+1), want).Body], want)
			}
			if res[i].SequenceNumber == "" || res[i].MessageID == "" || res[i].Attempts != 1 {
				t.Errorf("message %d: %+v; want a message ID and sequence number after 1 attempt", i, res[i])
			}
		}
	})

	t.Run("25 messages go in batches of at most 10, in order", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []producer.Message
		for i := range 25 {
			msgs = append(msgs, payment(fmt.Sprintf("pay_%02d", i), "cus_A"))
		}
		mustSend(t, p, msgs...)
		if got, want := proxy.batchSizes(), []int{10, 10, 5}; !slices.Equal(got, want) {
			t.Errorf("SendMessageBatch entries per call: %v; want %v", got, want)
		}
		got := testenv.Drain(t, client, url)
		want := make([]string, len(msgs))
		for i, m := range msgs {
			want[i] = m.Body
		}
		if !slices.Equal(bodies(got), want) {
			t.Errorf("received %q; want %q", bodies(got), want)
		}
	})

	t.Run("without a group function New fails", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		_, err := producer.New(client, url, func(o *producer.Options) { o.Key = lambdakitKey })
		if !errors.Is(err, producer.ErrNoGroupFunc) {
			t.Errorf("New without Group: %v; want ErrNoGroupFunc", err)
		}
		_, err = producer.New(client, url, func(o *producer.Options) { o.Group = producer.GroupFromField("customer_id") })
		if !errors.Is(err, producer.ErrNoKeyFunc) {
			t.Errorf("New without Key: %v; want ErrNoKeyFunc", err)
		}
		// The queue's attribute says FIFO even where the URL does not.
		_, err = producer.NewFromQueue(ctxFor(t), client, url, func(o *producer.Options) { o.Key = lambdakitKey })
		if !errors.Is(err, producer.ErrNoGroupFunc) {
			t.Errorf("NewFromQueue without Group: %v; want ErrNoGroupFunc", err)
		}
	})

	t.Run("a message without key or group is refused, the rest are sent", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []producer.Message{
			payment("pay_1", "cus_A"),
			{Body: `{"customer_id":"cus_A"}`},
			{Body: `{"payment_id":"pay_3"}`},
			{Body: `{"payment_id":"pay_4","customer_id":"has space"}`},
			payment("pay_5", "cus_A"),
		}
		res, err := p.Send(ctxFor(t), msgs)
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed", err)
		}
		if !errors.Is(res[1].Err, lambdakit.ErrNoKey) || !strings.Contains(res[1].Err.Error(), "idempotency key") {
			t.Errorf("message without key: %v; want an idempotency key error wrapping lambdakit.ErrNoKey", res[1].Err)
		}
		if res[2].Err == nil || !strings.Contains(res[2].Err.Error(), "message group") {
			t.Errorf("message without group: %v; want a message group error", res[2].Err)
		}
		if !errors.Is(res[3].Err, producer.ErrInvalidGroupID) {
			t.Errorf("group with a space: %v; want ErrInvalidGroupID", res[3].Err)
		}
		for _, i := range []int{1, 2, 3} {
			if res[i].Attempts != 0 {
				t.Errorf("refused message %d: %d attempts; want 0", i, res[i].Attempts)
			}
		}
		if got := bodies(testenv.Drain(t, client, url)); !slices.Equal(got, []string{msgs[0].Body, msgs[4].Body}) {
			t.Errorf("received %q; want the two valid messages", got)
		}
	})
}

func TestStandardQueue(t *testing.T) {
	client := sqsClient(t, "")
	url := testenv.Queue(t, client, false, nil)

	t.Run("no group, no dedup ID, no deduplication", func(t *testing.T) {
		p, err := producer.New(client, url)
		if err != nil {
			t.Fatal(err)
		}
		if p.FIFO() {
			t.Fatal("FIFO() = true for a standard queue")
		}
		msg := producer.Message{Body: "plain text is fine on a standard queue without a key"}
		res := mustSend(t, p, msg, msg)
		got := testenv.Drain(t, client, url)
		if len(got) != 2 {
			t.Fatalf("received %d messages; want 2 (standard queues do not deduplicate)", len(got))
		}
		for i, m := range got {
			if _, ok := m.Attributes["MessageDeduplicationId"]; ok {
				t.Errorf("message %d has a MessageDeduplicationId; want none", i)
			}
			if _, ok := m.Attributes["MessageGroupId"]; ok {
				t.Errorf("message %d has a MessageGroupId; want none", i)
			}
			if res[i].DedupID != "" || res[i].GroupID != "" || res[i].SequenceNumber != "" || res[i].MessageID == "" {
				t.Errorf("Result %d = %+v; want a message ID only", i, res[i])
			}
		}
	})

	t.Run("a group is sent, for fair queueing", func(t *testing.T) {
		p, err := producer.New(client, url, func(o *producer.Options) { o.Group = producer.GroupFromField("customer_id") })
		if err != nil {
			t.Fatal(err)
		}
		res := mustSend(t, p, payment("pay_1", "cus_A"))
		got := testenv.Drain(t, client, url)
		if len(got) != 1 {
			t.Fatalf("received %d messages; want 1", len(got))
		}
		if got[0].Attributes["MessageGroupId"] != "cus_A" || res[0].GroupID != "cus_A" {
			t.Errorf("received attributes %v, Result group %q; want group cus_A", got[0].Attributes, res[0].GroupID)
		}
	})

	t.Run("a key is reported, and required, but sends no dedup ID", func(t *testing.T) {
		p, err := producer.New(client, url, func(o *producer.Options) { o.Key = lambdakitKey })
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Send(ctxFor(t), []producer.Message{payment("pay_1", "cus_A"), {Body: `{"amount":1}`}})
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed for the message the consumer would fail", err)
		}
		if res[0].Err != nil || res[0].Key != "pay_1" || res[0].DedupID != "" {
			t.Errorf("Result 0 = %+v; want sent with key pay_1 and no dedup ID", res[0])
		}
		if !errors.Is(res[1].Err, lambdakit.ErrNoKey) {
			t.Errorf("Result 1 error %v; want lambdakit.ErrNoKey", res[1].Err)
		}
		if got := testenv.Drain(t, client, url); len(got) != 1 {
			t.Errorf("received %d messages; want 1", len(got))
		}
	})
}

func TestPartialFailures(t *testing.T) {
	client := sqsClient(t, "")
	msgs := make([]producer.Message, 12)
	for i := range msgs {
		msgs[i] = payment(fmt.Sprintf("pay_%02d", i), fmt.Sprintf("cus_%d", i%3))
	}

	t.Run("only the failed entries are sent again, and invalid ones never", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, true, nil)
		var waits sleeps
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, fifoOptions, func(o *producer.Options) {
			o.Backoff, o.MaxBackoff = 10*time.Millisecond, 15*time.Millisecond
			o.Sleep = waits.sleep
		})
		if err != nil {
			t.Fatal(err)
		}
		proxy.failEntry(msgs[3].Body, 2, false)  // fails twice, then goes through
		proxy.failEntry(msgs[5].Body, -1, false) // never goes through
		proxy.failEntry(msgs[7].Body, -1, true)  // invalid: not retried
		res, err := p.Send(ctxFor(t), msgs)
		if !errors.Is(err, producer.ErrFailed) || !strings.Contains(err.Error(), "2 of 12") {
			t.Errorf("Send: %v; want ErrFailed, 2 of 12", err)
		}
		for i, r := range res {
			wantAttempts, wantSeen := 1, 1
			switch i {
			case 3:
				wantAttempts, wantSeen = 3, 3
				if r.Err != nil {
					t.Errorf("message 3: %v; want sent on its third attempt", r.Err)
				}
			case 5:
				wantAttempts, wantSeen = 3, 3
				var ee *producer.EntryError
				if !errors.As(r.Err, &ee) || ee.SenderFault || ee.Code != "InternalError" || ee.Attempts != 3 {
					t.Errorf("message 5: %v; want an EntryError InternalError after 3 attempts", r.Err)
				}
			case 7:
				var ee *producer.EntryError
				if !errors.As(r.Err, &ee) || !ee.SenderFault || ee.Code != "InvalidParameterValue" {
					t.Errorf("message 7: %v; want an EntryError with SenderFault", r.Err)
				}
			default:
				if r.Err != nil {
					t.Errorf("message %d: %v; want sent", i, r.Err)
				}
			}
			if r.Attempts != wantAttempts {
				t.Errorf("message %d: %d attempts; want %d", i, r.Attempts, wantAttempts)
			}
			if got := proxy.seenCount(msgs[i].Body); got != wantSeen {
				t.Errorf("message %d was in %d requests; want %d", i, got, wantSeen)
			}
		}
		// Two retry rounds, each after a wait within the doubling bound.
		if len(waits.got) != 2 || waits.got[0] > 10*time.Millisecond || waits.got[1] > 15*time.Millisecond {
			t.Errorf("waits %v; want two, at most 10ms then 15ms", waits.got)
		}
		got := bodies(testenv.Drain(t, client, url))
		slices.Sort(got)
		var want []string
		for i, m := range msgs {
			if i != 5 && i != 7 {
				want = append(want, m.Body)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("received %q; want each sent message once: %q", got, want)
		}
	})

	t.Run("waits double up to the bound, with jitter", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, false, nil)
		var waits sleeps
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, func(o *producer.Options) {
			o.MaxAttempts = 20
			o.Backoff, o.MaxBackoff = time.Millisecond, 4*time.Millisecond
			o.Sleep = waits.sleep
		})
		if err != nil {
			t.Fatal(err)
		}
		proxy.failEntry(msgs[0].Body, -1, false)
		res, _ := p.Send(ctxFor(t), msgs[:1])
		if res[0].Attempts != 20 || proxy.seenCount(msgs[0].Body) != 20 {
			t.Fatalf("%d attempts, %d requests; want 20", res[0].Attempts, proxy.seenCount(msgs[0].Body))
		}
		if len(waits.got) != 19 {
			t.Fatalf("%d waits; want 19", len(waits.got))
		}
		atBound := 0
		for i, d := range waits.got {
			bound := min(time.Millisecond<<i, 4*time.Millisecond)
			if d < 0 || d > bound {
				t.Errorf("wait %d = %v; want within [0, %v]", i, d, bound)
			}
			if d == bound {
				atBound++
			}
		}
		if atBound == len(waits.got) || slices.Min(waits.got) == slices.Max(waits.got) {
			t.Errorf("waits %v; want them drawn at random below their bounds", waits.got)
		}
	})

	t.Run("a retry keeps the later messages of its group behind it", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, fifoOptions, func(o *producer.Options) { o.Sleep = (&sleeps{}).sleep })
		if err != nil {
			t.Fatal(err)
		}
		// 24 messages in two groups, A and B alternating; A's 4th message
		// (index 6, in the first batch) fails once.
		var in []producer.Message
		for i := range 24 {
			in = append(in, payment(fmt.Sprintf("pay_%02d", i), "cus_"+string(rune('A'+i%2))))
		}
		proxy.failEntry(in[6].Body, 1, false)
		mustSend(t, p, in...)
		order := map[string][]string{}
		for _, m := range testenv.Drain(t, client, url) {
			g := m.Attributes["MessageGroupId"]
			order[g] = append(order[g], aws.ToString(m.Body))
		}
		// Group A: 0, 2, 4 and 8 went in the first call with 6; 6 went
		// again before any later A message.
		var wantA, wantB []string
		for _, i := range []int{0, 2, 4, 8, 6, 10, 12, 14, 16, 18, 20, 22} {
			wantA = append(wantA, in[i].Body)
		}
		for i := 1; i < 24; i += 2 {
			wantB = append(wantB, in[i].Body)
		}
		if !slices.Equal(order["cus_A"], wantA) {
			t.Errorf("group A arrived as\n%q\nwant\n%q", order["cus_A"], wantA)
		}
		if !slices.Equal(order["cus_B"], wantB) {
			t.Errorf("group B arrived as\n%q\nwant\n%q", order["cus_B"], wantB)
		}
	})

	t.Run("a failed call is retried by the SDK, then its messages are reported", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		proxy.failCall(msgs[10].Body, http.StatusInternalServerError) // in the second call, with 11
		res, err := p.Send(ctxFor(t), msgs)
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed", err)
		}
		for i, r := range res {
			var ee *producer.EntryError
			switch {
			case i < 10 && r.Err != nil:
				t.Errorf("message %d: %v; want sent", i, r.Err)
			case i >= 10 && (r.Err == nil || errors.As(r.Err, &ee) || !strings.Contains(r.Err.Error(), "SendMessageBatch")):
				t.Errorf("message %d: %v; want the failure of the whole call", i, r.Err)
			}
		}
		// moto's test config lets the SDK make 3 attempts.
		if got := proxy.seenCount(msgs[11].Body); got != 3 {
			t.Errorf("the failing call was made %d times; want 3 (the SDK's retries)", got)
		}
		if got := testenv.Drain(t, client, url); len(got) != 10 {
			t.Errorf("received %d messages; want the 10 of the first call", len(got))
		}
	})

	t.Run("an entry the answer does not mention is reported", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		proxy.swallowEntry(msgs[1].Body)
		res, err := p.Send(ctxFor(t), msgs[:3])
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed", err)
		}
		if !errors.Is(res[1].Err, producer.ErrNoOutcome) || res[1].Attempts != 1 {
			t.Errorf("swallowed message: %v after %d attempts; want ErrNoOutcome after 1", res[1].Err, res[1].Attempts)
		}
		if res[0].Err != nil || res[2].Err != nil {
			t.Errorf("the others: %v, %v; want sent", res[0].Err, res[2].Err)
		}
	})

	t.Run("an ended context fails what is not sent", func(t *testing.T) {
		url := testenv.Queue(t, client, true, nil)
		p, err := producer.New(client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := p.Send(ctx, msgs[:3])
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed", err)
		}
		for i, r := range res {
			if !errors.Is(r.Err, context.Canceled) || r.Attempts != 0 {
				t.Errorf("message %d: %v after %d attempts; want context.Canceled, not attempted", i, r.Err, r.Attempts)
			}
		}
	})
}

func TestSizes(t *testing.T) {
	client := sqsClient(t, "")

	t.Run("the queue's MaximumMessageSize refuses larger messages with their size", func(t *testing.T) {
		url := testenv.Queue(t, client, true, map[string]string{"MaximumMessageSize": "1024"})
		p, err := producer.NewFromQueue(ctxFor(t), client, url, fifoOptions)
		if err != nil {
			t.Fatal(err)
		}
		if !p.FIFO() || p.MaxMessageSize() != 1024 {
			t.Fatalf("FIFO %v, MaxMessageSize %d; want the queue's: true, 1024", p.FIFO(), p.MaxMessageSize())
		}
		big := payment("pay_2", "cus_A")
		big.Body = strings.Replace(big.Body, `"amount"`, `"note":"`+strings.Repeat("x", 2000-len(big.Body)-10)+`","amount"`, 1)
		if len(big.Body) != 2000 {
			t.Fatalf("test body is %d bytes; want 2000", len(big.Body))
		}
		// 1000 bytes of body and 25 of attribute: over by one.
		attr := payment("pay_3", "cus_A")
		attr.Body += strings.Repeat(" ", 1000-len(attr.Body))
		attr.Attributes = map[string]types.MessageAttributeValue{"trace": {DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("t", 14))}}
		fits := payment("pay_4", "cus_A")
		fits.Body += strings.Repeat(" ", 1024-len(fits.Body))
		res, err := p.Send(ctxFor(t), []producer.Message{payment("pay_1", "cus_A"), big, attr, fits})
		if !errors.Is(err, producer.ErrFailed) {
			t.Errorf("Send: %v; want ErrFailed", err)
		}
		var tl *producer.TooLargeError
		if !errors.As(res[1].Err, &tl) || tl.Size != 2000 || tl.Max != 1024 || !strings.Contains(res[1].Err.Error(), "2000 bytes") {
			t.Errorf("2000-byte message: %v; want TooLargeError 2000 > 1024", res[1].Err)
		}
		if !errors.As(res[2].Err, &tl) || tl.Size != 1025 {
			t.Errorf("message with attribute: %v (size %d); want TooLargeError of 1025 bytes", res[2].Err, res[2].Size)
		}
		if res[0].Err != nil || res[3].Err != nil {
			t.Errorf("the other messages: %v, %v; want sent (1024 bytes is allowed)", res[0].Err, res[3].Err)
		}
		if got := testenv.Drain(t, client, url); len(got) != 2 {
			t.Errorf("received %d messages; want 2", len(got))
		}
	})

	t.Run("by default 1 MiB is the limit", func(t *testing.T) {
		url := testenv.Queue(t, client, false, nil)
		p, err := producer.New(client, url)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := p.Send(ctxFor(t), []producer.Message{{Body: strings.Repeat("x", 1<<20+1)}, {Body: "small"}})
		var tl *producer.TooLargeError
		if !errors.As(res[0].Err, &tl) || tl.Size != 1<<20+1 || tl.Max != producer.DefaultMaxMessageSize {
			t.Errorf("1 MiB + 1: %v; want TooLargeError", res[0].Err)
		}
		if res[1].Err != nil {
			t.Errorf("small message: %v; want sent", res[1].Err)
		}
	})

	t.Run("a call carries at most 1 MiB", func(t *testing.T) {
		proxy := newFaultProxy(t, moto.Server(t).URL)
		url := testenv.Queue(t, client, false, nil)
		p, err := producer.New(sqsClient(t, proxy.srv.URL), url)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []producer.Message
		for i := range 7 {
			msgs = append(msgs, producer.Message{Body: fmt.Sprint(i) + strings.Repeat("x", 300<<10)})
		}
		mustSend(t, p, msgs...)
		if got, want := proxy.batchSizes(), []int{3, 3, 1}; !slices.Equal(got, want) {
			t.Errorf("entries per call: %v; want %v (3 × 300 KiB fit in 1 MiB, 4 do not)", got, want)
		}
		if got := testenv.Drain(t, client, url); len(got) != 7 {
			t.Errorf("received %d messages; want 7", len(got))
		}
	})
}

func TestCheckRefusesWhatSQSWouldRefuse(t *testing.T) {
	p, err := producer.New(nil, "http://127.0.0.1:1/000000000000/q.fifo", fifoOptions)
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		msg  producer.Message
		want error
	}{
		{"empty body", producer.Message{}, producer.ErrInvalidBody},
		{"NUL in the body", producer.Message{Body: `{"payment_id":"p","customer_id":"c","x":"` + "\x00" + `"}`}, producer.ErrInvalidBody},
		{"invalid UTF-8", producer.Message{Body: `{"payment_id":"p","customer_id":"c","x":"` + "\xff" + `"}`}, producer.ErrInvalidBody},
		{"group over 128 characters", payment("p", strings.Repeat("g", 129)), producer.ErrInvalidGroupID},
		{"non-ASCII group", payment("p", "cüs"), producer.ErrInvalidGroupID},
		{"attribute without value", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"a": {DataType: str("String")}}}, producer.ErrInvalidAttribute},
		{"attribute name SQS reserves (AWS.)", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"AWS.trace": {DataType: str("String"), StringValue: str("x")}}}, producer.ErrInvalidAttribute},
		{"attribute name with a space", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"a b": {DataType: str("String"), StringValue: str("x")}}}, producer.ErrInvalidAttribute},
		{"attribute name with two periods in a row", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"a..b": {DataType: str("String"), StringValue: str("x")}}}, producer.ErrInvalidAttribute},
		{"Number attribute that is not a number", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"n": {DataType: str("Number"), StringValue: str("twelve")}}}, producer.ErrInvalidAttribute},
		{"Number attribute beyond 10^126", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"n": {DataType: str("Number.float"), StringValue: str("1e200")}}}, producer.ErrInvalidAttribute},
		{"attribute of unknown type", producer.Message{Body: payment("p", "c").Body, Attributes: map[string]types.MessageAttributeValue{"a": {DataType: str("Blob"), StringValue: str("x")}}}, producer.ErrInvalidAttribute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := p.Check(tc.msg); !errors.Is(r.Err, tc.want) {
				t.Errorf("Check: %v; want %v", r.Err, tc.want)
			}
		})
	}
	t.Run("a valid message passes, with its IDs", func(t *testing.T) {
		r := p.Check(producer.Message{
			Body:       `{"payment_id":"pay_9","customer_id":"cus_Z","note":"tab\tand emoji 😀"}`,
			Attributes: map[string]types.MessageAttributeValue{"n": {DataType: str("Number.int"), StringValue: str("12")}},
		})
		if r.Err != nil || r.Key != "pay_9" || r.DedupID != producer.DedupID("pay_9") || r.GroupID != "cus_Z" || r.Attempts != 0 {
			t.Errorf("Check = %+v; want key pay_9, its dedup ID, group cus_Z", r)
		}
	})
	t.Run("the key may come from an attribute", func(t *testing.T) {
		p, err := producer.New(nil, "http://127.0.0.1:1/000000000000/q.fifo", func(o *producer.Options) {
			o.Key = lambdakit.KeyFromAttribute("idempotency-key")
			o.Group = func(*events.SQSMessage) (string, error) { return "all", nil }
		})
		if err != nil {
			t.Fatal(err)
		}
		r := p.Check(producer.Message{Body: "x", Attributes: map[string]types.MessageAttributeValue{"idempotency-key": {DataType: str("String"), StringValue: str("k-1")}}})
		if r.Err != nil || r.Key != "k-1" {
			t.Errorf("Check = %+v; want key k-1 from the attribute", r)
		}
	})
}

func TestMessageSizeCountsAttributesAsSQSDoes(t *testing.T) {
	m := producer.Message{
		Body: "héllo", // 6 bytes
		Attributes: map[string]types.MessageAttributeValue{
			"bin": {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3, 4}},
			"s":   {DataType: aws.String("String.label"), StringValue: aws.String("xy")},
		},
	}
	// body 6; "bin" 3 + "Binary" 6 + 4 bytes; "s" 1 + "String.label" 12 + 2
	if got, want := m.Size(), 6+13+15; got != want {
		t.Errorf("Size() = %d; want %d", got, want)
	}
}

// The consumer side must not link the SQS client: that is why the
// producer is a package of its own. (The payment sample does link it, to
// send invalid payments to its dead-letter queue: a function that uses
// BatchOptions.DeadLetters publishes.)
func TestConsumerPackagesDoNotImportSQS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pkgs := []string{"github.com/lambdakit/lambdakit/lambdakit", "github.com/lambdakit/lambdakit/dynamostore"}
	out, err := exec.CommandContext(ctx, "go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/aws/aws-sdk-go-v2/service/sqs") || strings.HasSuffix(dep, "/lambdakit/producer") {
			t.Errorf("a consumer package depends on %s", dep)
		}
	}
}

// Several invocations at once in one process: each Send carries the trace
// of the invocation that sends, from its context.
func TestSendCarriesTheInvocationTraceHeader(t *testing.T) {
	const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	client, sent := tracedClient(t)
	p, err := producer.New(client, testenv.Queue(t, client, false, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(invocationCtx(t, header), []producer.Message{{Body: "one"}}); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) == 0 || got[len(got)-1] != header {
		t.Errorf("X-Amzn-Trace-Id sent: %q; want the invocation's %q on SendMessageBatch", got, header)
	}
}

// CheckWith refuses what a producer's Check refuses for the same message,
// group and limit, and takes what it takes: it is Check without the
// functions that derive the key and the group.
func TestCheckWithAgreesWithCheck(t *testing.T) {
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	for _, c := range []struct {
		name  string
		queue string
		group string
		msg   producer.Message
	}{
		{"a FIFO message with its group", "http://127.0.0.1:1/000000000000/q.fifo", "cus_1", producer.Message{Body: "{}"}},
		{"a FIFO message without a group", "http://127.0.0.1:1/000000000000/q.fifo", "", producer.Message{Body: "{}"}},
		{"a group SQS refuses", "http://127.0.0.1:1/000000000000/q.fifo", "cus 1", producer.Message{Body: "{}"}},
		{"a standard message without a group", "http://127.0.0.1:1/000000000000/q", "", producer.Message{Body: "{}"}},
		{"an empty body", "http://127.0.0.1:1/000000000000/q", "", producer.Message{}},
		{"a body SQS refuses", "http://127.0.0.1:1/000000000000/q", "", producer.Message{Body: "a\x00"}},
		{"an attribute name SQS reserves", "http://127.0.0.1:1/000000000000/q", "", producer.Message{Body: "{}", Attributes: map[string]types.MessageAttributeValue{"AWS.x": str("v")}}},
		{"larger than the limit", "http://127.0.0.1:1/000000000000/q", "", producer.Message{Body: strings.Repeat("x", 101)}},
	} {
		p, err := producer.New(nil, c.queue, func(o *producer.Options) {
			o.MaxMessageSize = 100
			o.Key = func(*events.SQSMessage) (string, error) { return "k", nil }
			if c.group != "" || o.FIFO {
				o.Group = func(*events.SQSMessage) (string, error) { return c.group, nil }
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := p.Check(c.msg)
		got := producer.CheckWith(c.msg, p.FIFO(), c.group, 100)
		if (got.Err == nil) != (want.Err == nil) || got.Size != want.Size || got.GroupID != want.GroupID {
			t.Errorf("%s: CheckWith = %+v; Check = %+v", c.name, got, want)
		}
		if got.Err != nil && want.Err != nil && got.Err.Error() != want.Err.Error() {
			t.Errorf("%s: CheckWith's error %v; Check's %v", c.name, got.Err, want.Err)
		}
	}
}

// CheckStrings gives, for attributes of data type String given as name →
// value, the Result CheckWith gives for the same attributes in the SDK's
// map: the same size, group and error, for every rule an attribute, the
// body, the group or the size can break.
func TestCheckStringsAgreesWithCheckWith(t *testing.T) {
	many := map[string]string{}
	for i := range awsrules.MaxMessageAttributes + 1 {
		many[fmt.Sprintf("a%d", i)] = "v"
	}
	ten := maps.Clone(many)
	delete(ten, "a0")
	for _, c := range []struct {
		name        string
		fifo        bool
		group, body string
		attrs       map[string]string
	}{
		{"no attributes", false, "", "{}", nil},
		{"one attribute, FIFO", true, "cus_1", "{}", map[string]string{"type": "payment.charged"}},
		{"a FIFO message without a group", true, "", "{}", map[string]string{"type": "x"}},
		{"a group SQS refuses", true, "cus 1", "{}", nil},
		{"an empty body", false, "", "", map[string]string{"type": "x"}},
		{"a body SQS refuses", false, "", "a\x00", nil},
		{"an attribute name SQS reserves", false, "", "{}", map[string]string{"AWS.x": "v"}},
		{"an attribute name with a space", false, "", "{}", map[string]string{"a b": "v"}},
		{"an empty attribute value", false, "", "{}", map[string]string{"type": ""}},
		{"an attribute value SQS refuses", false, "", "{}", map[string]string{"type": "a\uffff"}},
		{"too many attributes", false, "", "{}", many},
		{"as many attributes as SQS takes", false, "", "{}", ten},
		{"an attribute name that is not UTF-8", false, "", "{}", map[string]string{"a\xff": "v"}},
		{"an attribute value that is not UTF-8", false, "", "{}", map[string]string{"type": "a\xff"}},
		{"an attribute value with U+FFFE", false, "", "{}", map[string]string{"type": "a\ufffe"}},
		{"at the limit with its attributes", false, "", strings.Repeat("x", 100-len("type")-len("String")-1), map[string]string{"type": "x"}},
		{"over the limit with its attributes", false, "", strings.Repeat("x", 100-len("type")-len("String")), map[string]string{"type": "x"}},
	} {
		var sdk map[string]types.MessageAttributeValue
		if c.attrs != nil {
			sdk = map[string]types.MessageAttributeValue{}
			for k, v := range c.attrs {
				sdk[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
		}
		want := producer.CheckWith(producer.Message{Body: c.body, Attributes: sdk}, c.fifo, c.group, 100)
		got := producer.CheckStrings(c.body, c.attrs, c.fifo, c.group, 100)
		if got.Size != want.Size || got.GroupID != want.GroupID || (got.Err == nil) != (want.Err == nil) {
			t.Errorf("%s: CheckStrings = %+v; CheckWith = %+v", c.name, got, want)
			continue
		}
		if got.Err != nil && got.Err.Error() != want.Err.Error() {
			t.Errorf("%s: CheckStrings' error %v; CheckWith's %v", c.name, got.Err, want.Err)
		}
	}
}
