package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/ddbstream"
	"github.com/lambdakit/lambdakit/internal/eventfilter"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"gopkg.in/yaml.v3"
)

// With EVENTS_QUEUE_URL, as template.yaml deploys it, a charged payment
// publishes one payment.charged on its own row, written by the completion
// (no transaction): none for a declined card, a redelivery, or a payment
// whose lock was released (the gateway down, then charged on its retry:
// one event, for the charge). The relay, as the template configures it
// (its record attribute names, and its mapping's FilterCriteria applied
// as Lambda would), sends it once, though it reads the stream twice.
func TestChargedPaymentPublishesItsEventOnItsRecord(t *testing.T) {
	f := setup(t, nil)
	cfg := moto.Config(t)
	sqsc := sqs.NewFromConfig(cfg)
	f.cfg.EventsQueueURL = testenv.Queue(t, sqsc, true, nil)
	f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 300 * time.Millisecond}, f.logs.Logger())

	charged := lambdakittest.Message(body("pay_ev1", "cus_A", 1200), lambdakittest.InGroup("cus_A"))
	declined := lambdakittest.Message(body("pay_ev2", gateway.DeclinedCustomerPrefix+"_B", 900), lambdakittest.InGroup("cus_B"))
	released := lambdakittest.Message(body("pay_ev3", "cus_C", 300), lambdakittest.InGroup("cus_C"))
	f.gw.FailNext(1)
	if failed := f.run(t, released); len(failed) != 1 {
		t.Fatalf("failed %v; want pay_ev3 failed, its lock released", failed)
	}
	if failed := f.run(t, charged, declined, lambdakittest.Redelivery(released)); len(failed) != 0 {
		t.Fatalf("failed %v; want all recorded", failed)
	}
	f.run(t, lambdakittest.Redelivery(charged))
	if got := f.calls.Count("TransactWriteItems"); got != 0 {
		t.Errorf("%d TransactWriteItems; want none: the event rides on the completion's UpdateItem", got)
	}
	// A write unit per request (the lock's PutItem, the completion's
	// UpdateItem, billed by the larger of the item before and after):
	// the row with its event stays under 1 KB. ItemSize is an upper
	// bound on what DynamoDB bills; moto reports no real units.
	if size := dynamostore.ItemSize(f.ledger(t, "pay_ev1")); size > 1024 {
		t.Errorf("pay_ev1's row with its event is up to %d bytes; want at most 1 KB, one write unit", size)
	} else {
		t.Logf("pay_ev1's row with its event: at most %d bytes", size)
	}

	recs, err := ddbstream.Read(t.Context(), dynamodbstreams.NewFromConfig(cfg), streamOf(t, f.db, f.cfg.PaymentsTable), cfg.Region)
	if err != nil {
		t.Fatal(err)
	}
	filter := relayFilter(t)
	var kept []events.DynamoDBEventRecord
	for _, r := range recs {
		v, err := eventfilter.Record(r, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if filter.Match(v) {
			kept = append(kept, r)
		}
	}
	// pay_ev1's and pay_ev3's completions; moto also writes a stream
	// record for a completion retried unchanged, which AWS does not: none
	// here, since no completion was retried.
	if len(kept) != 2 {
		t.Errorf("the template's filter kept %d of %d stream records; want 2: the completions of pay_ev1 and pay_ev3", len(kept), len(recs))
	}
	relay := outbox.Relay(sqsc, func(o *outbox.RelayOptions) {
		o.Stream.Logger = lambdakittest.Logger(t)
		o.Record.KeyAttr, o.Record.StatusAttr = templateEnv(t, "RelayFunction", "RECORD_KEY_ATTR"), templateEnv(t, "RelayFunction", "RECORD_STATUS_ATTR")
	})
	for range 2 { // a stream read again: the same deduplication IDs
		resp, err := relay(t.Context(), events.DynamoDBEvent{Records: kept})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("relay: %v, %v", err, resp.BatchItemFailures)
		}
	}
	got := testenv.Drain(t, sqsc, f.cfg.EventsQueueURL)
	want := map[string]string{"pay_ev1": attr(f.ledger(t, "pay_ev1"), "charge_id"), "pay_ev3": attr(f.ledger(t, "pay_ev3"), "charge_id")}
	for _, m := range got {
		var ev chargedEvent
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "payment.charged" || ev.ChargeID == "" || want[ev.PaymentID] != ev.ChargeID || m.Attributes["MessageGroupId"] != ev.CustomerID {
			t.Errorf("event %+v in group %s; want a charge the ledger holds, in its customer's group", ev, m.Attributes["MessageGroupId"])
		}
		delete(want, ev.PaymentID)
	}
	if len(got) != 2 || len(want) != 0 {
		t.Errorf("events queue holds %d messages, missing %v; want one per charge", len(got), want)
	}
}

// With OUTBOX_TABLE too, a charged payment publishes one payment.charged
// through the outbox table, in the transaction that records the charge:
// none for a declined card, none more for a redelivery, and the relay
// sends it once.
func TestChargedPaymentPublishesItsEventThroughTheOutboxTable(t *testing.T) {
	f := setup(t, nil)
	cfg := moto.Config(t)
	table, streamARN := testenv.StreamTable(t, f.db, "-outbox", "pk", "id")
	sqsc := sqs.NewFromConfig(cfg)
	f.cfg.OutboxTable, f.cfg.EventsQueueURL = table, testenv.Queue(t, sqsc, true, nil)
	f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 300 * time.Millisecond}, f.logs.Logger())

	charged := lambdakittest.Message(body("pay_ev1", "cus_A", 1200), lambdakittest.InGroup("cus_A"))
	declined := lambdakittest.Message(body("pay_ev2", gateway.DeclinedCustomerPrefix+"_B", 900), lambdakittest.InGroup("cus_B"))
	if failed := f.run(t, charged, declined); len(failed) != 0 {
		t.Fatalf("failed %v; want both recorded", failed)
	}
	f.run(t, lambdakittest.Redelivery(charged))

	recs, err := ddbstream.Read(t.Context(), dynamodbstreams.NewFromConfig(cfg), streamARN, cfg.Region)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d outbox records; want one: pay_ev1's payment.charged", len(recs))
	}
	var ev chargedEvent
	if err := json.Unmarshal([]byte(recs[0].Change.NewImage["body"].String()), &ev); err != nil {
		t.Fatal(err)
	}
	row := f.ledger(t, "pay_ev1")
	if ev.Type != "payment.charged" || ev.PaymentID != "pay_ev1" || ev.Amount != 1200 || ev.CustomerID != "cus_A" || ev.ChargeID == "" || ev.ChargeID != attr(row, "charge_id") {
		t.Errorf("event %+v; want pay_ev1's charge, %s as the ledger has it", ev, attr(row, "charge_id"))
	}

	resp, err := outbox.Relay(sqsc, func(o *outbox.RelayOptions) { o.Stream.Logger = lambdakittest.Logger(t) })(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("relay: %v, %v", err, resp.BatchItemFailures)
	}
	got := testenv.Drain(t, sqsc, f.cfg.EventsQueueURL)
	if len(got) != 1 || got[0].Attributes["MessageGroupId"] != "cus_A" || !strings.Contains(aws.ToString(got[0].Body), `"charge_id":"`+ev.ChargeID+`"`) {
		t.Errorf("events queue holds %d messages; want pay_ev1's payment.charged in group cus_A", len(got))
	}
}

// OUTBOX_TABLE alone has no queue to publish to.
func TestConfigOutboxTableNeedsEventsQueue(t *testing.T) {
	env := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example", "OUTBOX_TABLE": "ob"}
	if _, err := configFromEnv(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "OUTBOX_TABLE needs EVENTS_QUEUE_URL") {
		t.Errorf("got %v; want a refusal", err)
	}
}

// streamOf is the ARN of table's stream.
func streamOf(t *testing.T, db *dynamodb.Client, table string) string {
	t.Helper()
	out, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil || out.Table.LatestStreamArn == nil {
		t.Fatalf("table %s: no stream (%v)", table, err)
	}
	return *out.Table.LatestStreamArn
}

// relayFilter is the FilterCriteria of the relay's stream mapping in
// template.yaml, compiled.
func relayFilter(t *testing.T) *eventfilter.Filter {
	t.Helper()
	tpl := loadTemplate(t)
	ev := mapping(t, mapping(t, mapping(t, tpl.resources["RelayFunction"].props)["Events"])["PaymentsStream"])
	var patterns []string
	for _, f := range list(mapping(t, mapping(t, ev["Properties"])["FilterCriteria"])["Filters"]) {
		patterns = append(patterns, mapping(t, f)["Pattern"].Value)
	}
	filter, err := eventfilter.New(patterns...)
	if err != nil {
		t.Fatal(err)
	}
	return filter
}

// templateEnv is the literal value of fn's environment variable name in
// template.yaml.
func templateEnv(t *testing.T, fn, name string) string {
	t.Helper()
	tpl := loadTemplate(t)
	v := mapping(t, mapping(t, mapping(t, tpl.resources[fn].props)["Environment"])["Variables"])[name]
	if v == nil || v.Kind != yaml.ScalarNode || v.Value == "" {
		t.Fatalf("%s has no %s in template.yaml", fn, name)
	}
	return v.Value
}

// A customer_id that SQS refuses as a message group ID fails the payment
// permanently before the charge, when the sample publishes its event:
// no charge, no ledger row. (Taken, the card was charged, then Publish
// refused the group ID, and the error released the key: charged with no
// record and no event.)
func TestPaymentWhoseEventCannotBePublishedIsNotCharged(t *testing.T) {
	f := setup(t, nil)
	cfg := moto.Config(t)
	table, _ := testenv.StreamTable(t, f.db, "-outbox", "pk", "id")
	f.cfg.OutboxTable, f.cfg.EventsQueueURL = table, testenv.Queue(t, sqs.NewFromConfig(cfg), true, nil)
	f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 300 * time.Millisecond}, f.logs.Logger())
	for i, customer := range []string{"cus 42", "cus_Zoë"} {
		id := fmt.Sprint("pay_group_", i)
		failed := f.run(t, lambdakittest.Message(body(id, customer, 500), lambdakittest.InGroup("g")))
		if len(failed) != 1 {
			t.Errorf("customer %q: failed %v; want the payment failed", customer, failed)
		}
		if row := f.ledger(t, id); row != nil {
			t.Errorf("customer %q: ledger row %v; want none", customer, row)
		}
	}
	if got := f.gw.Charges(); len(got) != 0 {
		t.Errorf("the gateway charged %d times; want none (the event's group ID was refused before the charge)", len(got))
	}
}

// A charge_id the gateway answers with a character SQS refuses in a body
// (U+FFFE, which JSON carries as "\ufffe" and encoding/json writes back
// raw) still gives the charge its ledger row and its event: the charge
// has happened, and the event's body escapes what SQS refuses. (Taken,
// Publish refused the body after the charge, permanently: charged, with
// no ledger row and no event.)
func TestChargeIDWithACharacterSQSRefusesIsRecordedAndPublished(t *testing.T) {
	charges := 0
	f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"charge_id":"ch_\ufffe1"}`)
	}))
	cfg := moto.Config(t)
	table, streamARN := testenv.StreamTable(t, f.db, "-outbox", "pk", "id")
	f.cfg.OutboxTable, f.cfg.EventsQueueURL = table, testenv.Queue(t, sqs.NewFromConfig(cfg), true, nil)
	f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 300 * time.Millisecond}, f.logs.Logger())
	failed := f.run(t, lambdakittest.Message(body("pay_fffe", "cus_A", 700), lambdakittest.InGroup("cus_A")))
	if charges != 1 {
		t.Fatalf("the gateway charged %d times; want once", charges)
	}
	if len(failed) != 0 || f.ledger(t, "pay_fffe") == nil {
		t.Fatalf("failed %v, ledger row %v; want the charge recorded", failed, f.ledger(t, "pay_fffe"))
	}
	recs, err := ddbstream.Read(t.Context(), dynamodbstreams.NewFromConfig(cfg), streamARN, cfg.Region)
	if err != nil || len(recs) != 1 {
		t.Fatalf("outbox records %d (%v); want the payment.charged", len(recs), err)
	}
	var ev chargedEvent
	if err := json.Unmarshal([]byte(recs[0].Change.NewImage["body"].String()), &ev); err != nil || ev.ChargeID != "ch_\ufffe1" {
		t.Errorf("event charge_id %q (%v); want the gateway's", ev.ChargeID, err)
	}
}

// The event encoded and escaped once before the charge and completed with
// the charge ID after it is the body the whole event would have: the JSON
// encoding/json writes for it, with the characters SQS refuses escaped,
// whatever the gateway's ID holds (quotes, HTML, controls, U+2028,
// U+FFFE, bytes that are not UTF-8), and whatever the checked part held
// (an order ID with U+FFFE). withChargeID writes a plain ID as it is,
// relying on encoding/json leaving it so.
func TestChargedEventWithChargeIDIsTheWholeEventsJSON(t *testing.T) {
	s := eventPayments(eventQueues[0])
	p := Payment{PaymentID: "pay_<1>", OrderID: "ord_\"1\"\ufffe", CustomerID: "cus_1", Currency: "EUR"}
	body, err := s.checkEvent(p, 1200)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "ch_1", "ch_3MmlLrLkdIwHu7ix~.-_:/+=", `ch_"q"\`, "ch_<", "ch_>", "ch_&", "ch_\t\x1f\x7f", "ch_é", "ch_\u2028", "ch_\ufffe", "ch_\xff"} {
		want, _ := json.Marshal(chargedEvent{Type: "payment.charged", PaymentID: p.PaymentID, OrderID: p.OrderID,
			CustomerID: p.CustomerID, Amount: 1200, Currency: p.Currency, ChargeID: id})
		if got := withChargeID(body, id); got != awsrules.EscapeJSON(string(want)) {
			t.Errorf("charge ID %q: got %s; want %s", id, got, awsrules.EscapeJSON(string(want)))
		}
	}
}

// An events queue URL the outbox refuses (not UTF-8), though it looks like
// a queue's URL, stops the function at start. (Taken, every payment was
// refused by its event's check, permanently: each went to the dead-letter
// queue.)
func TestEventsQueueURLTheOutboxRefusesFailsAtStart(t *testing.T) {
	env := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example",
		"EVENTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/events\xff.fifo"}
	c, err := configFromEnv(func(k string) string { return env[k] })
	if err == nil {
		_, err = newHandler(c, dynamodb.NewFromConfig(moto.Config(t)), nil, http.DefaultClient, slog.New(slog.DiscardHandler))
	}
	if err == nil || !strings.Contains(err.Error(), "EVENTS_QUEUE_URL") {
		t.Errorf("got %v; want the function refused at start, naming EVENTS_QUEUE_URL", err)
	}
}

// eventQueues are the queues the event's check is tried with: the
// template's FIFO queue and a standard one (which takes a message without
// a group ID).
var eventQueues = []string{"https://sqs.eu-west-1.amazonaws.com/123456789012/payments-events.fifo",
	"https://sqs.eu-west-1.amazonaws.com/123456789012/payments-events"}

// eventPayments is a payments that publishes to queueURL.
func eventPayments(queueURL string) *payments {
	return &payments{publish: func(context.Context, outbox.Message) error { return nil }, eventsQueue: queueURL}
}

// eventIsTheMarshalledOne fails t unless s.checkEvent, for p's event,
// returns the body encoding/json and awsrules.EscapeJSON make of it (its
// charge ID empty), and refuses what outbox.Check refuses of that message.
func eventIsTheMarshalledOne(t *testing.T, s *payments, p Payment) {
	t.Helper()
	js, err := json.Marshal(chargedEvent{Type: "payment.charged", PaymentID: p.PaymentID, OrderID: p.OrderID,
		CustomerID: p.CustomerID, Amount: 1200, Currency: p.Currency})
	if err != nil {
		t.Fatal(err)
	}
	want := awsrules.EscapeJSON(string(js))
	wantErr := outbox.Check(s.chargedMessage(p, want))
	got, err := s.checkEvent(p, 1200)
	name := fmt.Sprintf("queue %s, payment %q, order %q, customer %q, currency %q", s.eventsQueue, clip(p.PaymentID), clip(p.OrderID), clip(p.CustomerID), clip(p.Currency))
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("%s: checkEvent: %v; outbox.Check: %v", name, err, wantErr)
	case err == nil && got != want:
		t.Errorf("%s: body %s; want %s", name, clip(got), clip(want))
	case err != nil && !errors.Is(err, ErrInvalidPayment):
		t.Errorf("%s: %v; want ErrInvalidPayment", name, err)
	}
}

// The event checkEvent writes without encoding/json (fields it would
// write as they are) is the one encoding/json writes, escaped for SQS;
// any other goes through encoding/json; and the check is outbox.Check's:
// customer IDs SQS takes as a group ID or not (128 and 129 bytes, a
// space, non-ASCII, controls, U+FFFE, none), fields with characters
// encoding/json escapes or SQS refuses.
func TestCheckEventWritesTheEventAsEncodingJSONDoes(t *testing.T) {
	customers := []string{"cus_1", strings.Repeat("c", 128), strings.Repeat("c", 129), "cus 42", "cus_Zoë", "cus\x00",
		"cus\x7f", "cus\ufffe", "", "!~\"'<>&\\", "cus\xff"}
	for _, q := range eventQueues {
		s := eventPayments(q)
		for _, c := range customers {
			for _, order := range []string{"ord_1", "ord_\"<é>\"\u2028\ufffe", "ord\x00\xff"} {
				eventIsTheMarshalledOne(t, s, Payment{PaymentID: "pay_1", OrderID: order, CustomerID: c, Currency: "EUR"})
				eventIsTheMarshalledOne(t, s, Payment{PaymentID: "pay_<1>", OrderID: order, CustomerID: c, Currency: "E&R"})
			}
		}
		// Too large to publish, plain: refused as outbox.Check refuses it.
		eventIsTheMarshalledOne(t, s, Payment{PaymentID: "pay_1", OrderID: strings.Repeat("o", awsrules.MaxItemBytes), CustomerID: "c", Currency: "EUR"})
	}
}

// Whatever a payment holds, checkEvent's event is encoding/json's (see
// TestCheckEventWritesTheEventAsEncodingJSONDoes). `go test` runs the
// seeds; `go test -fuzz FuzzCheckEventWritesTheEventAsEncodingJSONDoes`
// searches.
func FuzzCheckEventWritesTheEventAsEncodingJSONDoes(f *testing.F) {
	f.Add("pay_1", "ord_1", "cus_1", "EUR", false)
	f.Add("pay_<1>", "ord\ufffe", "cus 42", "EU\x00", true)
	f.Add("p", "", strings.Repeat("c", 129), "", false)
	f.Add("p\xff", "o", "", "e", true)
	fifo, std := eventPayments(eventQueues[0]), eventPayments(eventQueues[1])
	f.Fuzz(func(t *testing.T, id, order, customer, currency string, standard bool) {
		s := fifo
		if standard {
			s = std
		}
		eventIsTheMarshalledOne(t, s, Payment{PaymentID: id, OrderID: order, CustomerID: customer, Currency: currency})
	})
}

// checkEvent's cost per payment, its event completed after the charge
// (withChargeID) and the result encoded, as Handle does for a charge.
func BenchmarkChargedEventOfAPayment(b *testing.B) {
	s := eventPayments(eventQueues[0])
	p := Payment{PaymentID: "pay_bench_000001", OrderID: "ord_1", CustomerID: "cus_000042", Currency: "EUR"}
	out := Outcome{Status: StatusCharged, ChargeID: "ch_3MmlLrLkdIwHu7ix"}
	b.ReportAllocs()
	for b.Loop() {
		body, err := s.checkEvent(p, 1250)
		if err != nil {
			b.Fatal(err)
		}
		_ = s.chargedMessage(p, withChargeID(body, out.ChargeID))
		if _, err := out.encode(); err != nil {
			b.Fatal(err)
		}
	}
}
