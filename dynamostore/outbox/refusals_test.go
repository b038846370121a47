package outbox_test

// What Publish refuses before any work commits, and what holds when a
// completion's answer is lost, found by attacking the first outbox
// (dab7a09): the tests of a collision, a message SQS would refuse and the
// transaction limit failed on it, each losing a committed handler's
// messages for good.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

func inserts(ev events.DynamoDBEvent) int {
	n := 0
	for _, r := range ev.Records {
		if r.EventName == "INSERT" {
			n++
		}
	}
	return n
}

// Two goroutines of one handler each publish an unnamed message, as
// handlers may stage from several goroutines: each takes its own place,
// so two items. (Taken apart from the staging, both took place 0, one
// item ID, and DynamoDB refused the transaction after the work.) The Now
// hook, called while the first holds its place, makes the overlap
// certain.
func TestConcurrentUnnamedPublishTakeDistinctPlaces(t *testing.T) {
	var arrived atomic.Int32
	barrier := func() time.Time {
		arrived.Add(1)
		for end := time.Now().Add(3 * time.Second); arrived.Load() < 2 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		return time.Now()
	}
	f := newFixtureWith(t, setup{
		fifo:   true,
		obOpts: func(o *outbox.Options) { o.Now = barrier },
		handle: publishFromGoroutines(2),
	})
	resp := f.deliver(pay("pay_conc", "cus_R", 1))
	ev := f.stream()
	if len(resp.BatchItemFailures) != 0 || inserts(ev) != 2 {
		t.Fatalf("failures %v, %d INSERTs; want the message done and two items (the handler published two messages and returned nil)", resp.BatchItemFailures, inserts(ev))
	}
}

// A handler fans one event out to two queues under one Name (the event's
// kind): two items, since the queue is part of the item's ID. (Without
// it, the transaction wrote one item twice, DynamoDB refused it after the
// work, and neither message was ever sent.)
func TestOneNameToTwoQueuesIsTwoItems(t *testing.T) {
	var second string
	f := newFixtureWith(t, setup{
		fifo: true,
		handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
			return ob.Publish(ctx,
				outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged", Body: "to ledger"},
				outbox.Message{QueueURL: second, GroupID: p.Customer, Name: "payment.charged", Body: "to email"},
			)
		},
	})
	second = testenv.Queue(t, f.sqs, false, map[string]string{}) // a second (standard) queue
	resp := f.deliver(pay("pay_fan", "cus_S", 1))
	ev := f.stream()
	if len(resp.BatchItemFailures) != 0 || inserts(ev) != 2 {
		t.Fatalf("failures %v, %d INSERTs; want the message done and one item per queue", resp.BatchItemFailures, inserts(ev))
	}
}

// A message for a FIFO queue without GroupID is refused by Publish, as
// lambdakit's producer refuses it. (Taken, its item committed and SQS
// refused every send of it: a committed run whose message was never
// delivered, holding its shard back until the retries gave up.)
func TestPublishRefusesAMessageSQSWouldRefuse(t *testing.T) {
	var pubErr error
	f := newFixtureWith(t, setup{
		fifo: true,
		handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
			pubErr = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, Name: "payment.charged", Body: "no group"})
			return pubErr
		},
	})
	f.deliver(pay("pay_nogroup", "cus_T", 1))
	if errors.Is(pubErr, outbox.ErrInvalidMessage) {
		return // refused before anything committed: fine
	}
	ev := f.stream()
	if inserts(ev) != 1 {
		t.Fatalf("Publish: %v; %d INSERTs", pubErr, inserts(ev))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	relay := outbox.Relay(f.sqs, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })
	for attempt := range 3 { // Lambda retries the batch from the failed record
		r, err := relay(ctx, ev)
		if err == nil && len(r.BatchItemFailures) == 0 {
			break
		}
		t.Logf("relay attempt %d: %v, failures %v", attempt+1, err, r.BatchItemFailures)
	}
	if got := f.downstream(); len(got) != 1 {
		t.Errorf("Publish accepted the message (err %v) and committed its item, but downstream holds %d messages; want 1 (or Publish to refuse it with ErrInvalidMessage)", pubErr, len(got))
	}
}

// More writes than a transaction holds are refused by Publish, while the
// handler can still act. (Taken, the completion of 101 writes was refused
// after the work, and the messages were never published.)
func TestPublishRefusesMoreWritesThanATransactionHolds(t *testing.T) {
	var pubErr error
	f := newFixtureWith(t, setup{
		fifo: true,
		handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
			msgs := make([]outbox.Message, 100)
			for i := range msgs {
				msgs[i] = outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: fmt.Sprint("line ", i)}
			}
			pubErr = ob.Publish(ctx, msgs...)
			return pubErr
		},
	})
	resp := f.deliver(pay("pay_many", "cus_U", 1))
	resp2 := f.deliver(lambdakittest.Redelivery(pay("pay_many", "cus_U", 1)))
	ev := f.stream()
	t.Logf("Publish: %v; failures %v then %v; INSERTs %d; runs %d", pubErr, resp.BatchItemFailures, resp2.BatchItemFailures, inserts(ev), f.runs.Load())
	if pubErr == nil && inserts(ev) == 0 {
		t.Errorf("Publish of 100 messages returned nil, yet nothing was committed and the work will not run again; want Publish to refuse (ErrInvalidMessage / ErrStagingUnsupported) while the handler can still react")
	}
}

// The completion's answer is lost (once, and then on every attempt): one
// INSERT, one downstream message.
func TestLostCompletionAnswerIsOneMessage(t *testing.T) {
	for _, lose := range []int{1, -1} {
		t.Run(fmt.Sprint("lose", lose), func(t *testing.T) {
			var proxy *testenv.Proxy
			f := newFixtureWith(t, setup{
				fifo: true,
				storeDB: func(f *fixture) *dynamodb.Client {
					proxy = testenv.NewProxy(t, moto.Server(t).URL)
					return dynamodb.NewFromConfig(moto.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL) })
				},
				handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
					return ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged", Body: "charged " + p.ID})
				},
			})
			proxy.LoseAnswer("TransactWriteItems", lose, http.StatusInternalServerError, testenv.DynamoDBError("InternalServerError", "answer lost"))
			m := pay("pay_lost", "cus_V", 1)
			r1 := f.deliver(m)
			proxy.Reset()
			r2 := f.deliver(lambdakittest.Redelivery(m))
			ev := f.stream()
			var kinds []string
			for _, r := range ev.Records {
				kinds = append(kinds, r.EventName)
			}
			t.Logf("failures %v then %v; stream %v; runs %d", r1.BatchItemFailures, r2.BatchItemFailures, kinds, f.runs.Load())
			if inserts(ev) != 1 {
				t.Fatalf("%d INSERTs; want 1", inserts(ev))
			}
			f.relay(ev)
			f.relay(ev)
			if got := f.downstream(); len(got) != 1 {
				t.Errorf("downstream %d; want 1", len(got))
			}
			if n := f.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times; want 1", n)
			}
		})
	}
}

// A run that publishes three unnamed messages and fails, then a retry that
// publishes one: one item.
func TestRetryPublishingFewerIsOneMessage(t *testing.T) {
	var run atomic.Int32
	f := newFixtureWith(t, setup{
		fifo: true,
		handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
			n := 1
			if run.Add(1) == 1 {
				n = 3
			}
			for i := range n {
				if err := ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: fmt.Sprint("m", i)}); err != nil {
					return err
				}
			}
			if n == 3 {
				return errors.New("fails after publishing")
			}
			return nil
		},
	})
	m := pay("pay_r", "cus_W", 1)
	f.deliver(m)
	f.deliver(lambdakittest.Redelivery(m))
	ev := f.stream()
	f.relay(ev)
	if got := f.downstream(); inserts(ev) != 1 || len(got) != 1 {
		t.Errorf("%d INSERTs, %d downstream; want 1, 1", inserts(ev), len(got))
	}
}

// With idempotency disabled there is no completion: Publish must fail,
// never drop the message silently.
func TestPublishWithIdempotencyDisabled(t *testing.T) {
	t.Setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", "true")
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "")
	var pubErr error
	f := newFixtureWith(t, setup{
		fifo: true,
		handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
			pubErr = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: "x"})
			return pubErr
		},
	})
	f.deliver(pay("pay_dis", "cus_X", 1))
	if !errors.Is(pubErr, lambdakit.ErrNotStaging) {
		t.Errorf("Publish with idempotency disabled: %v; want ErrNotStaging", pubErr)
	}
}

// The same without any hook: eight goroutines, ten payments.
func TestManyConcurrentUnnamedPublishes(t *testing.T) {
	f := newFixtureWith(t, setup{
		fifo:   true,
		handle: publishFromGoroutines(8),
	})
	failed := 0
	for i := range 10 {
		failed += len(f.deliver(pay(fmt.Sprint("pay_nh", i), "cus_Z", i)).BatchItemFailures)
	}
	if failed != 0 {
		t.Errorf("%d of 10 payments failed for good (handler returned nil); want 0", failed)
	}
}

// A message larger than an outbox item can hold (DynamoDB's 400 KB, below
// SQS's 1 MiB) is refused by Publish, not by a completion DynamoDB
// rejects after the work.
func TestPublishRefusesAMessageLargerThanAnItem(t *testing.T) {
	var pubErr error
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		pubErr = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: strings.Repeat("x", 400*1024)})
		return pubErr
	}})
	f.deliver(pay("pay_big", "cus_Z", 1))
	if !errors.Is(pubErr, outbox.ErrInvalidMessage) || !lambdakit.IsPermanent(pubErr) {
		t.Errorf("Publish: %v; want ErrInvalidMessage, permanent", pubErr)
	}
	if ev := f.stream(); inserts(ev) != 0 {
		t.Errorf("%d items written; want none", inserts(ev))
	}
}

// publishFromGoroutines is a handler that publishes n unnamed messages,
// each from a goroutine of its own.
func publishFromGoroutines(n int) func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
	return func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				errs[i] = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Body: fmt.Sprintf("line %d of %s", i, p.ID)})
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
}

// Attribute names SQS refuses (awsrules.CheckAttributeName, table-tested
// clause by clause there) are refused by Publish, permanently, and no
// item is written. (Taken, the item committed with the work, and the
// relay's every send of it was refused: the event was never delivered.)
func TestPublishRefusesAttributeNamesSQSRefuses(t *testing.T) {
	names := []string{"a b", "Zoë", "AWS.trace", "amazon.x", ".a", "a.", "a..b", strings.Repeat("n", 257)}
	errs := map[string]error{}
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		name := names[p.Amount]
		errs[name] = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged", Body: "b",
			Attributes: map[string]string{name: "v"}})
		return errs[name]
	}})
	for i := range names {
		f.deliver(pay(fmt.Sprint("pay_attr_", i), "cus_A", i))
	}
	for _, name := range names {
		if err := errs[name]; !errors.Is(err, outbox.ErrInvalidMessage) || !lambdakit.IsPermanent(err) {
			t.Errorf("attribute name %q: Publish said %v; want ErrInvalidMessage, permanent", name, err)
		}
	}
	if ev := f.stream(); inserts(ev) != 0 {
		t.Errorf("%d items written; want none", inserts(ev))
	}
}

// The item SetItem declares is part of the completion's transaction:
// with it, a 350 KB item and ten 390 KB messages are over DynamoDB's
// 4 MB (moto does not enforce it; the test asks Publish and SetItem).
// Whichever comes second is refused, permanently, before the work goes
// on. (Taken, Publish counted the staged writes only, and the completion
// was refused after the work.)
func TestPublishCountsTheItemSetInTheSameRun(t *testing.T) {
	item := map[string]types.AttributeValue{"receipt": &types.AttributeValueMemberS{Value: strings.Repeat("i", 350_000)}}
	messages := func(f *fixture, p payment) []outbox.Message {
		msgs := make([]outbox.Message, 10)
		for i := range msgs {
			msgs[i] = outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: fmt.Sprint("receipt.", i), Body: strings.Repeat("m", 390_000)}
		}
		return msgs
	}
	for _, order := range []string{"SetItem then Publish", "Publish then SetItem"} {
		t.Run(order, func(t *testing.T) {
			var setErr, pubErr error
			f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
				if order == "SetItem then Publish" {
					setErr = dynamostore.SetItem(ctx, item)
					pubErr = ob.Publish(ctx, messages(f, p)...)
				} else {
					pubErr = ob.Publish(ctx, messages(f, p)...)
					setErr = dynamostore.SetItem(ctx, item)
				}
				return errors.Join(setErr, pubErr)
			}})
			f.deliver(pay("pay_item", "cus_I", 1))
			first, second, want := setErr, pubErr, outbox.ErrInvalidMessage
			if order == "Publish then SetItem" {
				first, second, want = pubErr, setErr, lambdakit.ErrInvalidItem
			}
			if first != nil {
				t.Fatalf("the first call: %v; want it accepted (alone, it fits)", first)
			}
			if !errors.Is(second, want) || !errors.Is(second, lambdakit.ErrStagedTooLarge) {
				t.Errorf("the second call: %v; want %v wrapping lambdakit.ErrStagedTooLarge", second, want)
			}
		})
	}
}

// Check refuses, with no handler and nothing sent, what Publish would
// refuse of a message on its own: the payment sample calls it before the
// charge. The group IDs are those of a review's customers.
func TestCheckRefusesWhatPublishWouldRefuse(t *testing.T) {
	const fifo = "http://127.0.0.1:1/000000000000/events.fifo"
	for _, c := range []struct {
		name string
		msg  outbox.Message
		ok   bool
	}{
		{"a valid message", outbox.Message{QueueURL: fifo, GroupID: "cus_42", Name: "payment.charged", Body: "{}", Attributes: map[string]string{"type": "payment.charged"}}, true},
		{"unnamed", outbox.Message{QueueURL: fifo, GroupID: "cus_42", Body: "{}"}, true},
		{"a group ID with a space", outbox.Message{QueueURL: fifo, GroupID: "cus 42", Body: "{}"}, false},
		{"a group ID outside ASCII", outbox.Message{QueueURL: fifo, GroupID: "cus_Zoë", Body: "{}"}, false},
		{"no group ID on a FIFO queue", outbox.Message{QueueURL: fifo, Body: "{}"}, false},
		{"an attribute name SQS reserves", outbox.Message{QueueURL: fifo, GroupID: "g", Body: "{}", Attributes: map[string]string{"AWS.x": "v"}}, false},
		{"a body SQS refuses", outbox.Message{QueueURL: fifo, GroupID: "g", Body: "a\x00"}, false},
		{"no queue", outbox.Message{GroupID: "g", Body: "{}"}, false},
		{"a name of the outbox's", outbox.Message{QueueURL: fifo, GroupID: "g", Name: "#1", Body: "{}"}, false},
		{"a name that is not UTF-8", outbox.Message{QueueURL: fifo, GroupID: "g", Name: "charged\xff", Body: "{}"}, false},
		{"a queue URL that is not UTF-8", outbox.Message{QueueURL: fifo + "\xff", GroupID: "g", Body: "{}"}, false},
		{"larger than an item", outbox.Message{QueueURL: fifo, GroupID: "g", Body: strings.Repeat("x", 400*1024)}, false},
	} {
		err := outbox.Check(c.msg)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("%s: Check = %v; want ok=%v, or ErrInvalidMessage", c.name, err, c.ok)
		}
	}
}

// A message to a queue whose MaximumMessageSize is below SQS's 1 MiB is
// held to the queue's limit when MaxMessageSize says it, counted as SQS
// counts: the body, each attribute's name, type and value, and the
// relay's ID attribute (19 + 6 + 71 bytes). Left at 0 the limit is the
// item's, as before; a MaxMessageSize no queue can have is refused.
func TestCheckHoldsAMessageToItsQueuesMaxMessageSize(t *testing.T) {
	const queue = "http://127.0.0.1:1/000000000000/events"
	attrs := map[string]string{"type": "x"} // 4 + 6 + 1 bytes
	id := len(outbox.IDAttribute) + len("String") + len("outbox#") + 64
	fits := 2048 - id - 11
	msg := func(body, max int) outbox.Message {
		return outbox.Message{QueueURL: queue, Name: "e", Body: strings.Repeat("x", body), Attributes: attrs, MaxMessageSize: max}
	}
	for _, c := range []struct {
		name string
		msg  outbox.Message
		ok   bool
	}{
		{"at the queue's limit", msg(fits, 2048), true},
		{"a byte over the queue's limit", msg(fits+1, 2048), false},
		{"the same without MaxMessageSize", msg(fits+1, 0), true},
		{"300 KB to a 1 MiB queue", msg(300<<10, 1<<20), true},
		{"300 KB to a 256 KiB queue", msg(300<<10, 256<<10), false},
		{"the least MaxMessageSize", msg(1, 1024), true},
		{"below the least", msg(1, 1023), false},
		{"above SQS's most", msg(1, 1<<20+1), false},
		{"negative", msg(1, -1), false},
	} {
		err := outbox.Check(c.msg)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("%s: Check = %v; want ok=%v, or ErrInvalidMessage", c.name, err, c.ok)
		}
	}
	var tooLarge *producer.TooLargeError
	if err := outbox.Check(msg(fits+1, 2048)); !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "MaxMessageSize 2048") {
		t.Errorf("over the queue's limit: %v; want a TooLargeError naming MaxMessageSize", err)
	}
}

// What Check passes before the charge, Publish takes after it, whatever
// the handler staged in between: an unnamed message is named by its place
// among the run's writes ("#0" for Check, "#10" after ten writes), and the
// name is part of the item, so the largest body Check passes must be one
// Publish takes at any place. The body is the largest Check passes, found
// by bisection. The test asks Publish only: an item that size (about
// 407,000 bytes) is within AWS's 400 KiB, but over moto's 405,000, so
// moto refuses the completion that AWS would take.
func TestCheckPassesOnlyWhatPublishTakesAfterOtherWrites(t *testing.T) {
	msg := func(f *fixture, n int) outbox.Message {
		return outbox.Message{QueueURL: f.queue, GroupID: "cus_P", Body: strings.Repeat("x", n)}
	}
	var checkErr, pubErr error
	effects := 0
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		lo, hi := 0, 410_000
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if outbox.Check(msg(f, mid)) == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if checkErr = outbox.Check(msg(f, lo)); checkErr != nil {
			return checkErr
		}
		for i := range 10 { // the ledger rows of the charge
			if err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.outbox), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "ledger"}, "id": &types.AttributeValueMemberS{Value: fmt.Sprint(p.ID, "#", i)},
			}}}); err != nil {
				return err
			}
		}
		effects++ // the card is charged
		pubErr = ob.Publish(ctx, msg(f, lo))
		return pubErr
	}})
	f.deliver(pay("pay_edge", "cus_P", 1))
	if checkErr != nil || effects != 1 {
		t.Fatalf("Check: %v, effects %d; want a message Check passes, and the charge", checkErr, effects)
	}
	if pubErr != nil {
		t.Errorf("Check passed the message before the charge; Publish after it: %v; want it taken", pubErr)
	}
}

// Check refuses two messages to one queue with one name, as Publish
// would refuse them together (one item ID): a handler that checks its
// messages before the charge must not learn of it after.
func TestCheckRefusesTwoMessagesOfOneNameToOneQueue(t *testing.T) {
	const fifo = "http://127.0.0.1:1/000000000000/events.fifo"
	m := outbox.Message{QueueURL: fifo, GroupID: "cus_42", Name: "payment.charged", Body: "{}"}
	if err := outbox.Check(m, m); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Errorf("Check of the same named message twice: %v; want ErrInvalidMessage, as Publish says", err)
	}
	other := m
	other.Name = "payment.receipt"
	if err := outbox.Check(m, other); err != nil {
		t.Errorf("Check of two names: %v; want ok", err)
	}
}

// Check runs on every record of a function that checks its events before
// its effect, and PublishOnRecord checks again: a message with one
// attribute is checked without building a producer, an event for a
// KeyFunc, the outbox's ID attribute, or a slice of names or of messages
// seen: without allocating (the sample's payment.charged took 18
// allocations a check, over 2.5 KB, and later 2).
func TestCheckAllocatesLittle(t *testing.T) {
	msg := outbox.Message{QueueURL: "http://127.0.0.1:1/000000000000/events.fifo", GroupID: "cus_42", Name: "payment.charged",
		Body: `{"type":"payment.charged","payment_id":"pay_1"}`, Attributes: map[string]string{"type": "payment.charged"}}
	if n := testing.AllocsPerRun(100, func() {
		if err := outbox.Check(msg); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Errorf("Check made %.0f allocations; want none", n)
	}
}

// A Name that is not UTF-8 grows on its way to DynamoDB: the SDK sends
// each invalid byte as U+FFFD, three bytes. A 50,000-byte name and a
// 300,000-byte body fit the item as Publish counts it, but the item
// DynamoDB gets is over 450,000 bytes, past its 400 KB: refused by the
// completion, after the work, on every run. Publish must refuse it, or
// the item be written.
func TestPublishRefusesANameThatGrowsPastAnItem(t *testing.T) {
	var pubErr error
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		pubErr = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: strings.Repeat("\xff", 50_000), Body: strings.Repeat("x", 300_000)})
		return pubErr
	}})
	resp := f.deliver(pay("pay_name", "cus_N", 1))
	if errors.Is(pubErr, outbox.ErrInvalidMessage) && lambdakit.IsPermanent(pubErr) {
		return // refused before anything committed: fine
	}
	if ev := f.stream(); len(resp.BatchItemFailures) != 0 || inserts(ev) != 1 {
		t.Errorf("Publish: %v; failures %v, %d items written; want Publish to refuse it (ErrInvalidMessage), or its item written", pubErr, resp.BatchItemFailures, inserts(ev))
	}
}

// A handler that publishes through two outboxes (two tables) sends each
// item through its table's relay, but an item's ID comes from the record,
// the queue and the name only: two messages of one name to one queue get
// one ID, and a consumer keyed by IDAttribute (or a FIFO queue) drops the
// second. They are refused before the work, or sent under two IDs. The
// queue is a standard one, whose deduplication hides nothing.
func TestOneNameToOneQueueThroughTwoOutboxesIsNotOneMessage(t *testing.T) {
	var second *outbox.Outbox
	var pubErr error
	f := newFixtureWith(t, setup{handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		if err := ob.Publish(ctx, outbox.Message{QueueURL: f.queue, Name: "payment.charged", Body: "to ledger"}); err != nil {
			return err
		}
		pubErr = second.Publish(ctx, outbox.Message{QueueURL: f.queue, Name: "payment.charged", Body: "to email"})
		return pubErr
	}})
	table, streamARN := testenv.StreamTable(t, f.db, "-outbox2", "pk", "id")
	var err error
	if second, err = outbox.New(table); err != nil {
		t.Fatal(err)
	}
	f.deliver(pay("pay_two_tables", "cus_W", 1))
	if errors.Is(pubErr, outbox.ErrInvalidMessage) && lambdakit.IsPermanent(pubErr) {
		return // refused before anything committed: fine
	}
	f.relay(f.stream())
	f.relay(readStream(t, f.streams, streamARN, f.region))
	ids := map[string]bool{}
	got := f.downstream()
	for _, m := range got {
		ids[aws.ToString(m.MessageAttributes[outbox.IDAttribute].StringValue)] = true
	}
	if len(got) != 2 || len(ids) != 2 {
		t.Errorf("the second Publish: %v; downstream holds %d messages under %d IDs; want it refused (ErrInvalidMessage), or two messages under two IDs", pubErr, len(got), len(ids))
	}
}

// An item of the handler's own in the outbox table (a subscription, with
// a queueUrl and a name of its own) is no outbox message: a message of
// that queue and name is no repeat of it, and is taken.
func TestPublishTakesANameThatAnotherItemOfTheTableHolds(t *testing.T) {
	var pubErr error
	f := newFixtureWith(t, setup{fifo: true, handle: func(ctx context.Context, ob *outbox.Outbox, f *fixture, p payment) error {
		if err := dynamostore.Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(f.outbox), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "subscription"}, "id": &types.AttributeValueMemberS{Value: p.ID},
			"queueUrl": &types.AttributeValueMemberS{Value: f.queue}, "name": &types.AttributeValueMemberS{Value: "payment.charged"},
		}}}); err != nil {
			return err
		}
		pubErr = ob.Publish(ctx, outbox.Message{QueueURL: f.queue, GroupID: p.Customer, Name: "payment.charged", Body: "charged"})
		return pubErr
	}})
	resp := f.deliver(pay("pay_sub", "cus_V", 1))
	if pubErr != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("Publish: %v, failures %v; want the message taken (the subscription is no outbox message)", pubErr, resp.BatchItemFailures)
	}
}
